"""Console users signing in (issue 40, ui/auth.py, pages/login.py): name and password open a
rotated session whose role is read on every request, so a disable or a demotion holds from the next
request; sign-out ends it for every copy of the cookie; wrong passwords count in the auth
throttle; the password is never stored or logged as itself; the console is open only while no user
and no DL_API_TOKEN exist."""

from __future__ import annotations

import logging
import uuid

from dataloader.model.principal import Role
from dataloader.ui import auth
from tests.support.engine import enqueue
from tests.ui.conftest import TOKEN, csrf_of, signed_in
from tests.ui.users_support import PASSWORD, add_user, app_of, sign_in, users_console, users_db

__all__ = ["users_db"]


async def test_the_console_is_open_until_a_user_exists_then_everybody_signs_in(users_db, dsn):
    async with users_console(dsn) as client:
        assert (await client.get("/ui/")).status_code == 200, "no user, no token: open, as the API is"
        await add_user(client, "alice", Role.OPERATOR)
        page = await client.get("/ui/")
        assert page.status_code == 303 and page.headers["location"].startswith("/ui/login")
        login = await client.get("/ui/login")
        assert 'id="login-user"' in login.text and 'id="login-token"' not in login.text
        await sign_in(client, "alice")
        home = await client.get("/ui/")
        assert home.status_code == 200 and "alice (operator)" in home.text


async def test_sign_in_rotates_and_sign_out_ends_the_session_for_a_replayed_cookie(users_db, dsn):
    queue = f"replay-user-{uuid.uuid4().hex[:6]}"
    await enqueue(users_db, "dl.noop", queue=queue)
    async with users_console(dsn) as client:
        await add_user(client, "alice", Role.OPERATOR)
        await sign_in(client, "alice")
        first = client.cookies[auth.SESSION_COOKIE]
        csrf = await sign_in(client, "alice")
        second = client.cookies[auth.SESSION_COOKIE]
        assert first != second
        assert not await users_db.fetchval(
            "SELECT count(*) FROM dl_console_sessions WHERE session_hash = sha256($1::bytea)", first.encode()), \
            "signing in again deleted the browser's previous session (rotation)"
        assert await users_db.fetchval("SELECT user_name FROM dl_console_sessions") == "alice"
        out = await client.post("/ui/logout", data={"csrf": csrf})
        assert out.status_code == 303
        client.cookies.set(auth.SESSION_COOKIE, second, path="/ui")  # the replay, with a copy
        assert (await client.get("/ui/")).status_code == 303
        action = await client.post("/ui/queues/pause", data={"queue": queue, "csrf": csrf})
        assert action.status_code == 401
    assert not await users_db.fetchval("SELECT count(*) FROM dl_queue_flow WHERE queue = $1", queue)


async def test_a_disabled_user_is_refused_at_the_next_request(users_db, dsn):
    async with users_console(dsn) as client:
        await add_user(client, "alice", Role.OPERATOR)
        await add_user(client, "root", Role.ADMIN)
        await sign_in(client, "alice")
        assert (await client.get("/ui/")).status_code == 200
        await app_of(client).users.disable("alice")
        assert (await client.get("/ui/")).status_code == 303, "signed out at once"
        assert (await client.get("/ui/live?topic=overview")).status_code == 401
        await sign_in(client, "alice", expect=401)
        await app_of(client).users.enable("alice")
        assert (await client.get("/ui/")).status_code == 303, "enabling does not bring an old session back"
        await sign_in(client, "alice")


async def test_a_role_change_holds_from_the_next_request(users_db, dsn):
    queue = f"demote-{uuid.uuid4().hex[:6]}"
    await enqueue(users_db, "dl.noop", queue=queue)
    async with users_console(dsn) as client:
        await add_user(client, "alice", Role.OPERATOR)
        csrf = await sign_in(client, "alice")
        assert f'id="queue-pause-{queue}"' in (await client.get("/ui/")).text
        await app_of(client).users.set_role("alice", Role.VIEWER)
        page = await client.get("/ui/")
        assert page.status_code == 200 and f'id="queue-pause-{queue}"' not in page.text
        assert "alice (viewer)" in page.text
        refused = await client.post("/ui/queues/pause", data={"queue": queue, "csrf": csrf})
        assert refused.status_code == 403
        assert not await users_db.fetchval("SELECT count(*) FROM dl_queue_flow WHERE queue = $1", queue)
        await app_of(client).users.set_role("alice", Role.ADMIN)
        assert (await client.get("/ui/users")).status_code == 200


async def test_a_new_password_signs_the_user_out_and_the_old_one_no_longer_works(users_db, dsn):
    async with users_console(dsn) as client:
        await add_user(client, "alice", Role.VIEWER)
        await sign_in(client, "alice")
        await app_of(client).users.set_password("alice", "a brand new passphrase")
        assert (await client.get("/ui/")).status_code == 303
        await sign_in(client, "alice", expect=401)
        await sign_in(client, "alice", "a brand new passphrase")


async def test_wrong_passwords_are_throttled_and_not_told_apart_from_unknown_names(users_db, dsn):
    async with users_console(dsn, auth_max_failures=3, auth_failure_window_sec=600) as client:
        await add_user(client, "alice", Role.VIEWER)
        wrong = csrf_of((await client.get("/ui/login")).text)
        answers = [await client.post("/ui/login", data={"csrf": wrong, "user": user, "password": "not it at all"})
                   for user in ("alice", "nobody", "Not A Name")]
        assert [a.status_code for a in answers] == [401, 401, 401]
        assert len({a.text.count("Wrong user name or password.") for a in answers}) == 1
        slowed = await client.post("/ui/login", data={"csrf": wrong, "user": "alice", "password": PASSWORD})
        assert slowed.status_code == 429 and int(slowed.headers["retry-after"]) > 0
        assert auth.SESSION_COOKIE not in client.cookies, "the right password is not even checked while throttled"


async def test_the_password_is_never_stored_or_logged_as_itself(users_db, dsn, caplog):
    secret = "a very particular passphrase"
    with caplog.at_level(logging.DEBUG):
        async with users_console(dsn) as client:
            await add_user(client, "alice", Role.VIEWER, password=secret)
            await sign_in(client, "alice", secret)
            await sign_in(client, "alice", secret + " wrong", expect=401)
    stored = await users_db.fetchval("SELECT password_hash FROM dl_users WHERE name = 'alice'")
    assert stored.startswith("$argon2id$") and secret not in stored
    dump = await users_db.fetchval("SELECT string_agg(t::text, ' ') FROM dl_users t")
    assert secret not in dump
    logged = " ".join(f"{r.getMessage()} {r.__dict__}" for r in caplog.records)
    assert "alice" in logged and secret not in logged


async def test_the_api_token_still_signs_in_as_an_admin_beside_users(users_db, dsn):
    async with users_console(dsn, api_token=TOKEN) as client:
        await add_user(client, "alice", Role.VIEWER)
        login = await client.get("/ui/login")
        assert 'id="login-user"' in login.text and 'id="login-token"' in login.text
        await signed_in(client)
        page = await client.get("/ui/users")
        assert page.status_code == 200 and "DL_API_TOKEN (admin)" in page.text and 'data-user="alice"' in page.text
        await sign_in(client, "alice")  # a user beside the token; the token session was rotated out
        assert "alice (viewer)" in (await client.get("/ui/")).text


async def test_an_action_runs_acting_as_the_signed_in_user(users_db, dsn, monkeypatch):
    """The guard puts the session's principal in force (`acting_as`): the App call an action makes
    (and the audit trail's write inside it) sees who acts, with the user's role and address."""
    from dataloader.model.principal import PrincipalKind, current_principal, role_actions

    queue = f"who-{uuid.uuid4().hex[:6]}"
    seen = []
    async with users_console(dsn) as client:
        app = app_of(client)
        await add_user(client, "alice", Role.OPERATOR)
        csrf = await sign_in(client, "alice")
        pause = app.pause_queue

        async def recording(name: str, **options):
            seen.append(current_principal())
            return await pause(name, **options)

        monkeypatch.setattr(app, "pause_queue", recording)
        assert (await client.post("/ui/queues/pause", data={"queue": queue, "csrf": csrf})).status_code == 303
    [principal] = seen
    assert (principal.kind, principal.label, principal.actions) == (PrincipalKind.USER, "user:alice",
                                                                    role_actions(Role.OPERATOR))
    assert principal.address == "127.0.0.1"
