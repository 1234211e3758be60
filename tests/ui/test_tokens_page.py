"""The console's API tokens page (ui/pages/tokens.py): the list, a token created with its secret
shown once, a revocation asked first and then done, bad input as the capability's error page with
nothing written, and the page refused to a principal without `manage_access`."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator

import asyncpg
import pytest

from dataloader.model.principal import Role
from tests.ui.conftest import console_client, csrf_of
from tests.ui.users_support import add_user, sign_in, users_console, users_db  # noqa: F401 (fixture)


@pytest.fixture
async def no_tokens(db: asyncpg.Pool) -> AsyncIterator[asyncpg.Pool]:
    await db.execute("DELETE FROM dl_api_tokens")
    yield db
    await db.execute("DELETE FROM dl_api_tokens")


async def test_create_shows_the_secret_once_and_revoke_asks_first(no_tokens: asyncpg.Pool, dsn: str) -> None:
    db = no_tokens
    async with console_client(dsn) as client:
        page = await client.get("/ui/tokens")
        assert page.status_code == 200 and "No API token" in page.text and 'href="/ui/tokens"' in page.text
        csrf = csrf_of(page.text)
        created = await client.post("/ui/tokens", data={"csrf": csrf, "name": "ci-page", "scope": ["enqueue", "read"],
                                                        "expires_days": "30"})
        assert created.status_code == 201, created.text[-1500:]
        secret = re.search(r'id="token-secret">(dlt_[A-Za-z0-9_-]{43})<', created.text).group(1)
        row = await db.fetchrow("SELECT id, scopes, expires_at - created_at AS life FROM dl_api_tokens")
        assert row["scopes"] == ["enqueue", "read"] and row["life"].days == 30
        assert created.headers["cache-control"] == "no-store"
        again = await client.get("/ui/tokens")
        assert secret not in again.text and "ci-page" in again.text and "active" in again.text
        # the token works on the API, and the API is closed to callers without one now
        assert (await client.get("/api/v1/jobs", headers={"Authorization": f"Bearer {secret}"})).status_code == 200
        assert (await client.get("/api/v1/jobs")).status_code == 401
        asked = await client.post(f"/ui/tokens/{row['id']}/revoke", data={"csrf": csrf})
        assert asked.status_code == 200 and "Revoke token ci-page?" in asked.text
        assert await db.fetchval("SELECT revoked_at FROM dl_api_tokens") is None
        done = await client.post(f"/ui/tokens/{row['id']}/revoke", data={"csrf": csrf, "confirm": "yes"})
        assert done.status_code == 303 and done.headers["location"] == "/ui/tokens"
        assert await db.fetchval("SELECT revoked_at FROM dl_api_tokens") is not None
        assert (await client.get("/api/v1/jobs", headers={"Authorization": f"Bearer {secret}"})).status_code == 401


@pytest.mark.parametrize("form", [{"name": "Bad Name", "scope": "read"}, {"name": "ok"},
                                  {"name": "ok", "scope": "read", "expires_days": "999"},
                                  {"name": "ok", "scope": "read", "expires_days": "soon"}])
async def test_bad_input_is_its_error_page_and_writes_nothing(no_tokens: asyncpg.Pool, dsn: str,
                                                              form: dict[str, str]) -> None:
    async with console_client(dsn) as client:
        csrf = csrf_of((await client.get("/ui/tokens")).text)
        refused = await client.post("/ui/tokens", data={"csrf": csrf, **form})
    assert refused.status_code == 422 and "validation_error" in refused.text, refused.text[-800:]
    assert await no_tokens.fetchval("SELECT count(*) FROM dl_api_tokens") == 0


async def test_a_principal_without_manage_access_is_refused(no_tokens: asyncpg.Pool, users_db: asyncpg.Pool,  # noqa: F811
                                                           dsn: str) -> None:
    """An operator signed in to the console (its guard puts the user's role in force) may not."""
    async with users_console(dsn) as client:
        await add_user(client, "olga", Role.OPERATOR)
        csrf = await sign_in(client, "olga")
        listed = await client.get("/ui/tokens")
        created = await client.post("/ui/tokens", data={"csrf": csrf, "name": "nope", "scope": "admin"})
    assert listed.status_code == 403 and created.status_code == 403, (listed.text[-500:], created.text[-500:])
    assert await no_tokens.fetchval("SELECT count(*) FROM dl_api_tokens") == 0
