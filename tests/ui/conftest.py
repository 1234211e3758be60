"""Fixtures of the console's in-process tests: the HTTP app (API and console) on an open App."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

import httpx
import pytest

from dataloader import App, Settings
from dataloader.api import create_app

TOKEN = "t0ken-for-tests"


@pytest.fixture(scope="session", autouse=True)
async def shared_chromium_closed() -> AsyncIterator[None]:
    """The worker's shared chromium (tests/ui/browser.py), closed when the session ends."""
    yield
    from tests.ui.browser import close_shared_chromium

    await close_shared_chromium()


@asynccontextmanager
async def console_client(dsn: str, **settings: object) -> AsyncIterator[httpx.AsyncClient]:
    app = await App(Settings(db_dsn=dsn, workers=[], **settings)).open()  # type: ignore[arg-type]
    try:
        transport = httpx.ASGITransport(app=create_app(app.settings, context=app))
        async with httpx.AsyncClient(transport=transport, base_url="http://console") as client:
            yield client
    finally:
        await app.close()


def csrf_of(html: str) -> str:
    found = re.search(r'name="dl-csrf" content="([^"]+)"', html) or re.search(r'name="csrf" value="([^"]+)"', html)
    assert found, "no CSRF token on the page"
    return found.group(1)


async def signed_in(client: httpx.AsyncClient, token: str = TOKEN) -> str:
    """Sign in through the login page; the page's CSRF token."""
    page = await client.get("/ui/login")
    csrf = csrf_of(page.text)
    answer = await client.post("/ui/login", data={"csrf": csrf, "token": token, "next": "/ui/"})
    assert answer.status_code == 303, answer.text
    return csrf


Signer = Callable[[httpx.AsyncClient], str]
