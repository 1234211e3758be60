"""Signing in as a console user in the in-process tests: cheap password hashes (the cost settings'
lowest, so a sign-in costs a millisecond, not half a second of CPU) and a `dl_users` emptied before
and after each test (a user left behind would make every later console test sign in)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx
import pytest

from dataloader.ui import auth
from tests.ui.conftest import console_client, csrf_of

CHEAP_HASH = {"password_hash_time_cost": 1, "password_hash_memory_kib": 64}
PASSWORD = "correct horse battery"


async def empty_users(pool) -> None:
    await pool.execute("TRUNCATE dl_users CASCADE")  # and the sessions that name a user


@pytest.fixture
async def users_db(db):
    await empty_users(db)
    yield db
    await empty_users(db)


@asynccontextmanager
async def users_console(dsn: str, **settings: object) -> AsyncIterator[httpx.AsyncClient]:
    async with console_client(dsn, **{**CHEAP_HASH, **settings}) as client:
        yield client


async def add_user(client: httpx.AsyncClient, name: str, role: str, password: str = PASSWORD) -> None:
    """Through the App behind `client` (what `app.users.create` does for every face)."""
    await app_of(client).users.create(name, password, role)


def app_of(client: httpx.AsyncClient):
    transport = client._transport
    assert isinstance(transport, httpx.ASGITransport)
    return transport.app.state.runtime.require_app()  # type: ignore[attr-defined]


async def sign_in(client: httpx.AsyncClient, name: str, password: str = PASSWORD, *, expect: int = 303) -> str:
    """Sign in through the login page; the page's CSRF token."""
    csrf = csrf_of((await client.get("/ui/login")).text)
    answer = await client.post("/ui/login", data={"csrf": csrf, "user": name, "password": password, "next": "/ui/"})
    assert answer.status_code == expect, (answer.status_code, answer.text[-400:])
    if expect == 303:
        assert auth.SESSION_COOKIE in client.cookies
    return csrf
