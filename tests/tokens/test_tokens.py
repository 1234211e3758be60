"""API tokens as a capability (tokens/manager.py) and in its Python, SyncApp and CLI faces: the
secret is shown once and only its SHA-256 is stored; bad input is refused the same way in every face
and writes nothing; the guard's cache trusts a token at most LOOKUP_CACHE_SEC and never past its
expiry (a revocation made elsewhere is seen within the bound, one made here at once); last_used_at
costs one write a minute, not one per request. Time is a ManualClock: no test sleeps."""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections.abc import AsyncIterator

import asyncpg
import pytest

from dataloader import ApiTokenExists, ApiTokenNotFound, InvalidApiToken, Settings, SyncApp
from dataloader.model.api_token import LOOKUP_CACHE_SEC, TOKEN_PREFIX
from dataloader.model.clock import ManualClock
from dataloader.model.principal import Action, PrincipalKind, acting_as, current_principal
from dataloader.storage.token_repository import ApiTokenRepository
from dataloader.tokens.manager import TokenManager
from tests.support.cli import run


@pytest.fixture
async def tokens_db(pool: asyncpg.Pool) -> AsyncIterator[asyncpg.Pool]:
    """No API token before or after (a token left behind closes the API of later tests' apps)."""
    await pool.execute("DELETE FROM dl_api_tokens")
    yield pool
    await pool.execute("DELETE FROM dl_api_tokens")


def node(pool: asyncpg.Pool) -> tuple[TokenManager, ManualClock]:
    clock = ManualClock()
    return TokenManager(ApiTokenRepository(pool), clock=clock), clock


async def test_the_secret_is_shown_once_and_only_its_hash_is_stored(tokens_db: asyncpg.Pool) -> None:
    tokens, _ = node(tokens_db)
    created = await tokens.create(name="ci-deploy", scopes=["enqueue", "read"], expires_in="30d")
    assert created.secret.startswith(TOKEN_PREFIX) and len(created.secret) == len(TOKEN_PREFIX) + 43
    row = await tokens_db.fetchrow("SELECT * FROM dl_api_tokens")
    assert bytes(row["token_hash"]) == hashlib.sha256(created.secret.encode()).digest()
    assert created.secret not in json.dumps({k: str(v) for k, v in dict(row).items()})
    assert row["scopes"] == ["enqueue", "read"] and row["created_by"] == "library:python"
    assert 29.9 * 86400 < (row["expires_at"] - row["created_at"]).total_seconds() <= 30 * 86400 + 1
    assert "secret" not in created.token.to_dict() and created.to_dict()["secret"] == created.secret
    principal = await tokens.authenticate(created.secret, "10.0.0.7")
    assert principal is not None and principal.label == "token:ci-deploy" and principal.address == "10.0.0.7"
    assert principal.kind is PrincipalKind.TOKEN and principal.actions == {Action.ENQUEUE, Action.READ}
    with acting_as(principal):
        second = await tokens.create(name="made-by-a-token", scopes=["read"])
        assert current_principal() is principal
    assert second.token.created_by == "token:ci-deploy"
    assert await tokens.authenticate(created.secret[:-1] + "x") is None


@pytest.mark.parametrize("fields", [
    {"name": "", "scopes": ["read"]}, {"name": "UPPER", "scopes": ["read"]}, {"name": "a/b", "scopes": ["read"]},
    {"name": "x" * 64, "scopes": ["read"]}, {"name": "ok", "scopes": []}, {"name": "ok", "scopes": ["superuser"]},
    {"name": "ok", "scopes": ["read"], "expires_in": "30s"}, {"name": "ok", "scopes": ["read"], "expires_in": "3y"},
    {"name": "ok", "scopes": ["read"], "expires_in": float("inf")}, {"name": "ok", "scopes": None},
])
async def test_bad_input_is_refused_before_anything_is_written(tokens_db: asyncpg.Pool, fields: dict) -> None:
    tokens, _ = node(tokens_db)
    with pytest.raises(InvalidApiToken) as refused:
        await tokens.create(**fields)
    assert refused.value.code == "validation_error" and refused.value.fields
    assert await tokens_db.fetchval("SELECT count(*) FROM dl_api_tokens") == 0


async def test_a_live_name_is_unique_and_a_revoked_one_may_be_taken_again(tokens_db: asyncpg.Pool) -> None:
    tokens, _ = node(tokens_db)
    first = await tokens.create(name="ci", scopes=["enqueue"])
    with pytest.raises(ApiTokenExists):
        await tokens.create(name="ci", scopes=["read"])
    await tokens.revoke("ci")
    again = await tokens.create(name="ci", scopes=["read"])
    assert [t.name for t in await tokens.list(include_revoked=False)] == ["ci"]
    assert {t.id for t in await tokens.list()} == {first.token.id, again.token.id}
    assert (await tokens.get("ci")).id == again.token.id and (await tokens.get(str(first.token.id))).revoked_at
    with pytest.raises(ApiTokenNotFound):
        await tokens.revoke("nobody")


async def test_a_revocation_elsewhere_is_seen_within_the_bound_and_here_at_once(tokens_db: asyncpg.Pool) -> None:
    node_a, _ = node(tokens_db)
    node_b, clock_b = node(tokens_db)
    created = await node_a.create(name="shared", scopes=["operate"])
    assert await node_a.authenticate(created.secret) is not None
    assert await node_b.authenticate(created.secret) is not None
    await node_a.revoke("shared")
    assert await node_a.authenticate(created.secret) is None  # the node that revoked: its next request
    clock_b.advance(LOOKUP_CACHE_SEC - 0.1)
    assert await node_b.authenticate(created.secret) is not None  # another node: still within its bound
    clock_b.advance(0.2)
    assert await node_b.authenticate(created.secret) is None  # and past it, refused


async def test_a_cached_token_lives_no_longer_than_its_expiry(tokens_db: asyncpg.Pool) -> None:
    tokens, clock = node(tokens_db)
    created = await tokens.create(name="short", scopes=["read"])
    await tokens_db.execute("UPDATE dl_api_tokens SET expires_at = now() + interval '2 seconds'")
    assert await tokens.authenticate(created.secret) is not None
    # Revoked behind this node's back (no cache drop): only a look-up can see it.
    await tokens_db.execute("UPDATE dl_api_tokens SET revoked_at = now()")
    clock.advance(1.0)
    assert await tokens.authenticate(created.secret) is not None  # cached: under 2 s and under the bound
    clock.advance(1.1)
    assert await tokens.authenticate(created.secret) is None  # past its expiry the cache asked again


async def test_last_used_at_is_one_write_a_minute_not_one_per_request(tokens_db: asyncpg.Pool) -> None:
    tokens, clock = node(tokens_db)
    created = await tokens.create(name="busy", scopes=["enqueue"])
    assert await tokens_db.fetchval("SELECT last_used_at FROM dl_api_tokens") is None
    await tokens.authenticate(created.secret)
    first = await tokens_db.fetchval("SELECT last_used_at FROM dl_api_tokens")
    assert first is not None
    xid = await tokens_db.fetchval("SELECT pg_snapshot_xmax(pg_current_snapshot())::text")
    for _ in range(50):  # cached: no statement at all
        await tokens.authenticate(created.secret)
    clock.advance(LOOKUP_CACHE_SEC + 0.1)
    await tokens.authenticate(created.secret)  # looked up again, within the minute: no write
    assert await tokens_db.fetchval("SELECT pg_snapshot_xmax(pg_current_snapshot())::text") == xid
    assert await tokens_db.fetchval("SELECT last_used_at FROM dl_api_tokens") == first
    await tokens_db.execute("UPDATE dl_api_tokens SET last_used_at = now() - interval '61 seconds'")
    clock.advance(LOOKUP_CACHE_SEC + 0.1)
    await tokens.authenticate(created.secret)
    assert await tokens_db.fetchval("SELECT last_used_at > now() - interval '5 seconds' FROM dl_api_tokens")


async def test_the_cache_is_bounded(tokens_db: asyncpg.Pool) -> None:
    tokens = TokenManager(ApiTokenRepository(tokens_db), clock=ManualClock(), max_cached=2)
    secrets = [(await tokens.create(name=f"t{i}", scopes=["read"])).secret for i in range(3)]
    for secret in secrets:
        assert await tokens.authenticate(secret) is not None
    assert len(tokens._cache) == 2


async def test_whether_any_token_exists_is_cached_and_changed_here_at_once(tokens_db: asyncpg.Pool) -> None:
    tokens, clock = node(tokens_db)
    other, _ = node(tokens_db)
    assert not await tokens.any_live()
    await other.create(name="elsewhere", scopes=["read"])
    assert not await tokens.any_live()  # made by another node: seen within the bound
    clock.advance(LOOKUP_CACHE_SEC + 0.1)
    assert await tokens.any_live()
    await tokens.revoke("elsewhere")
    assert not await tokens.any_live()
    await tokens.create(name="here", scopes=["read"])
    assert await tokens.any_live()


async def test_the_sync_app_face(tokens_db: asyncpg.Pool, dsn: str) -> None:
    def sync_calls() -> list[str]:
        with SyncApp(Settings(db_dsn=dsn, workers=[])) as app:
            created = app.tokens.create(name="sync", scopes=["read"], expires_in=3600)
            listed = [t.name for t in app.tokens.list()]
            revoked = app.tokens.revoke(created.token.id)
            with pytest.raises(InvalidApiToken):
                app.tokens.create(name="sync", scopes=[])
            return [*listed, revoked.state(revoked.created_at), app.tokens.get(created.token.id).name]

    assert await asyncio.to_thread(sync_calls) == ["sync", "revoked", "sync"]


async def test_the_cli_face(tokens_db: asyncpg.Pool, cli_env: dict[str, str]) -> None:
    created = await asyncio.to_thread(run, ["tokens", "create", "--name", "ci-cli", "--scope", "enqueue",
                                            "--scope", "read", "--expires-in", "7d"], cli_env)
    assert created.returncode == 0, created.stderr
    body = json.loads(created.stdout)
    assert body["secret"].startswith(TOKEN_PREFIX) and body["scopes"] == ["enqueue", "read"]
    assert body["state"] == "active" and body["created_by"].startswith("cli:")
    assert "shown only now" in created.stderr
    listed = await asyncio.to_thread(run, ["tokens", "list"], cli_env)
    assert [t["name"] for t in json.loads(listed.stdout)] == ["ci-cli"] and "secret" not in listed.stdout
    revoked = await asyncio.to_thread(run, ["tokens", "revoke", "ci-cli"], cli_env)
    assert revoked.returncode == 0 and json.loads(revoked.stdout)["state"] == "revoked", revoked.stderr
    for args, code in ((["tokens", "create", "--name", "Bad", "--scope", "read"], 2),
                       (["tokens", "create", "--name", "ok", "--scope", "root"], 2),
                       (["tokens", "create", "--name", "ok", "--scope", "read", "--expires-in", "forever"], 2),
                       (["tokens", "revoke", "ci-cli"], 1)):
        refused = await asyncio.to_thread(run, args, cli_env)
        assert refused.returncode == code, (args, refused.stdout, refused.stderr)
        assert len(refused.stderr.strip().splitlines()) == 1 and refused.stderr.startswith("dataloader: "), args
    assert await tokens_db.fetchval("SELECT count(*) FROM dl_api_tokens") == 1

