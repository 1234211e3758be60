"""The console's /ui/users page (admins only): add a user, change a role, set a password, disable,
enable and delete one (asked first), each through app.users' rules: a bad name or a short password
is the error page and writes nothing, the last enabled admin is kept."""

from __future__ import annotations

from dataloader.model.principal import Role
from dataloader.ui.actions import ROUTE_ACTIONS
from tests.ui.test_confirm_and_notice import USERS_ACTIONS, notice_after
from tests.ui.users_support import add_user, app_of, sign_in, users_console, users_db

__all__ = ["users_db"]


async def test_an_admin_manages_users_from_the_console_and_each_action_says_what_it_did(users_db, dsn):
    assert USERS_ACTIONS == {path for path in ROUTE_ACTIONS if path.startswith("/users")}
    async with users_console(dsn) as client:
        await add_user(client, "root", Role.ADMIN)
        csrf = await sign_in(client, "root")

        async def act(path: str, form: dict[str, str] | None = None) -> str:
            return await notice_after(client, await client.post(path, data={"csrf": csrf, **(form or {})}))

        assert await act("/ui/users", {"name": "bob", "password": "long enough pass", "role": "operator"}) == \
            "User bob added as operator."
        assert 'data-user="bob"' in (await client.get("/ui/users")).text
        assert await act("/ui/users/bob/role", {"role": "viewer"}) == \
            "bob is now viewer: it holds from their next request."
        assert (await app_of(client).users.get("bob")).role is Role.VIEWER
        assert await act("/ui/users/bob/disable") == "bob disabled: signed out everywhere, and may not sign in."
        assert (await app_of(client).users.get("bob")).disabled
        assert await act("/ui/users/bob/enable") == "bob enabled: they may sign in again."
        assert await act("/ui/users/bob/password", {"password": "another long one"}) == \
            "New password for bob; every session of theirs is ended."
        asked = await client.post("/ui/users/bob/delete", data={"csrf": csrf})
        assert asked.status_code == 200 and "Delete user bob?" in asked.text
        assert await users_db.fetchval("SELECT count(*) FROM dl_users WHERE name = 'bob'") == 1
        assert await act("/ui/users/bob/delete", {"confirm": "yes"}) == "User bob deleted."
        assert not await users_db.fetchval("SELECT count(*) FROM dl_users WHERE name = 'bob'")


async def test_bad_input_on_the_users_page_is_the_error_page_and_writes_nothing(users_db, dsn):
    async with users_console(dsn) as client:
        await add_user(client, "root", Role.ADMIN)
        csrf = await sign_in(client, "root")
        for form, said in (({"name": "Bad Name", "password": "long enough pass", "role": "viewer"}, "user name"),
                           ({"name": "bob", "password": "short", "role": "viewer"}, "at least 12"),
                           ({"name": "bob", "password": "long enough pass", "role": "god"}, "must be one of")):
            answer = await client.post("/ui/users", data={"csrf": csrf, **form})
            assert answer.status_code == 422 and said in answer.text, (form, answer.status_code)
        demote = await client.post("/ui/users/root/role", data={"csrf": csrf, "role": "viewer"})
        assert demote.status_code == 409 and "last enabled admin" in demote.text
        assert (await client.post("/ui/users/nobody/disable", data={"csrf": csrf})).status_code == 404
    assert await users_db.fetchval("SELECT array_agg(name || ':' || role) FROM dl_users") == ["root:admin"]
