"""`app.users` (users/manager.py): the rules every face shares (name shape, roles, password length),
argon2id hashes re-made when weaker than the node's settings, and the last enabled admin kept
even when two admins demote each other at once."""

from __future__ import annotations

import asyncio

import pytest

from dataloader import App, LastAdmin, Settings, UserExists, UserNotFound, ValidationFailed
from dataloader.model import user as rules
from dataloader.model.principal import Role
from tests.conftest import wait_until
from tests.ui.users_support import CHEAP_HASH, empty_users


@pytest.fixture
async def app(db, dsn):
    await empty_users(db)
    app = await App(Settings(db_dsn=dsn, workers=[], **CHEAP_HASH)).open()  # type: ignore[arg-type]
    yield app
    await app.close()
    await empty_users(db)


@pytest.mark.parametrize("name", ["", "Alice", "-x", "a b", "é", "x" * 65, None])
def test_a_bad_name_is_refused_with_the_same_words_everywhere(name):
    with pytest.raises(ValidationFailed, match="user name"):
        rules.user_name(name)


@pytest.mark.parametrize("password", ["short", "x" * 1025, "twelve chars\x00", 123])
def test_a_bad_password_is_refused_without_echoing_it(password):
    with pytest.raises(ValidationFailed) as caught:
        rules.password(password)
    assert str(password) not in str(caught.value) or isinstance(password, int)


def test_roles_are_the_three_of_the_model():
    assert rules.ROLES == ("viewer", "operator", "admin") and rules.role("operator") is Role.OPERATOR
    with pytest.raises(ValidationFailed, match="viewer, operator, admin"):
        rules.role("root")


async def test_create_list_change_and_delete(app, db):
    alice = await app.users.create("alice@example.com", "long enough pass", "operator")
    assert (alice.name, alice.role, alice.disabled, alice.last_login_at) == ("alice@example.com", Role.OPERATOR,
                                                                             False, None)
    with pytest.raises(UserExists):
        await app.users.create("alice@example.com", "long enough pass")
    assert [u.name for u in await app.users.list()] == ["alice@example.com"]
    assert (await app.users.set_role("alice@example.com", "viewer")).role is Role.VIEWER
    assert await app.users.authenticate("alice@example.com", "long enough pass") is not None
    assert (await app.users.get("alice@example.com")).last_login_at is not None
    await app.users.delete("alice@example.com")
    with pytest.raises(UserNotFound):
        await app.users.get("alice@example.com")
    with pytest.raises(UserNotFound):
        await app.users.disable("alice@example.com")


async def test_the_last_enabled_admin_is_kept(app):
    await app.users.create("root", "long enough pass", "admin")
    await app.users.create("ops", "long enough pass", "operator")
    for change in (app.users.set_role("root", "viewer"), app.users.disable("root"), app.users.delete("root")):
        with pytest.raises(LastAdmin):
            await change
    await app.users.set_role("ops", "admin")
    await app.users.disable("root")  # another admin is left
    with pytest.raises(LastAdmin):
        await app.users.delete("ops")  # root remains, disabled: nobody could manage users any more
    await app.users.delete("root")
    await app.users.delete("ops")  # the only user: back to the set-up without users
    assert await app.users.list() == []


async def test_two_admins_demoting_each_other_at_once_leave_one(app):
    await app.users.create("a1", "long enough pass", "admin")
    await app.users.create("a2", "long enough pass", "admin")
    results = await asyncio.gather(app.users.set_role("a1", "viewer"), app.users.set_role("a2", "viewer"),
                                   return_exceptions=True)
    assert sorted(type(r).__name__ for r in results) == ["LastAdmin", "User"], results
    admins = [u.name for u in await app.users.list() if u.role is Role.ADMIN]
    assert len(admins) == 1


@pytest.mark.parametrize(("held", "demoted"), [("a1", "a2"), ("a2", "a1")])
async def test_a_role_change_locks_the_users_in_name_order(app, db, held: str, demoted: str):
    """The two demotions above deadlocked now and then (CI, 2026-12-04): one locked the other admin's
    row first, the other its own. Every change that guards the last admin locks the users it reads
    in name order, whichever it changes: with one admin's row held elsewhere, a demotion of the
    other waiting on it holds a1's row and not a2's, both ways round."""
    await app.users.create("a1", "long enough pass", "admin")
    await app.users.create("a2", "long enough pass", "admin")
    holder = await db.acquire()
    held_tx = holder.transaction()
    await held_tx.start()
    demote = None
    try:
        await holder.execute("SELECT 1 FROM dl_users WHERE name = $1 FOR UPDATE", held)
        demote = asyncio.create_task(app.users.set_role(demoted, "viewer"))
        await wait_until(lambda: db.fetchval(
            "SELECT count(*) > 0 FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock' "
            "AND pid <> pg_backend_pid()"), timeout=10, message="the demotion to wait on the held row")
        async with db.acquire() as probe, probe.transaction():
            a1_free = await probe.fetchval("SELECT EXISTS (SELECT 1 FROM dl_users WHERE name = 'a1' "
                                           "FOR UPDATE SKIP LOCKED)")
            a2_free = await probe.fetchval("SELECT EXISTS (SELECT 1 FROM dl_users WHERE name = 'a2' "
                                           "FOR UPDATE SKIP LOCKED)")
        # a1 before a2: while waiting, the demotion holds a1 (its own or the held one) and not a2
        assert (a1_free, a2_free) == (False, held == "a1"), (held, demoted, a1_free, a2_free)
    finally:
        await held_tx.rollback()
        await db.release(holder)
    assert demote is not None and (await demote).role is Role.VIEWER


async def test_a_weaker_hash_is_remade_at_the_next_sign_in(app, db):
    await app.users.create("alice", "long enough pass")
    weak = await db.fetchval("SELECT password_hash FROM dl_users WHERE name = 'alice'")
    stronger = await App(Settings(db_dsn=app.settings.db_dsn, workers=[], password_hash_time_cost=2,
                                  password_hash_memory_kib=128)).open()  # type: ignore[arg-type]
    try:
        assert await stronger.users.authenticate("alice", "long enough pass") is not None
    finally:
        await stronger.close()
    remade = await db.fetchval("SELECT password_hash FROM dl_users WHERE name = 'alice'")
    assert remade != weak and "m=128,t=2" in remade
    assert await app.users.authenticate("alice", "wrong password!!") is None


def test_sync_app_users_is_the_blocking_twin(dsn, db):
    from dataloader import SyncApp

    with SyncApp(Settings(db_dsn=dsn, workers=[], **CHEAP_HASH)) as app:  # type: ignore[arg-type]
        assert app.users.create("carol", "long enough pass", "operator").role is Role.OPERATOR
        assert [u.name for u in app.users.list()] == ["carol"]
        assert app.users.set_role("carol", "viewer").role is Role.VIEWER
        assert app.users.set_password("carol", "another long pass").name == "carol"
        assert app.users.disable("carol").disabled and not app.users.enable("carol").disabled
        assert app.users.get("carol").name == "carol"
        app.users.delete("carol")
        assert app.users.list() == []
