from __future__ import annotations

from collections.abc import AsyncIterator

import asyncpg
import httpx
import pytest

from dataloader import App, Queue, Settings
from dataloader.api import create_app

PROCESS_TABLES = "dl_process_feed, dl_process_events, dl_process_tasks, dl_processes"


def process_settings(dsn: str, **overrides: object) -> Settings:
    values: dict[str, object] = {"db_dsn": dsn, "workers": [Queue("plain", 2)], "heartbeat_sec": 0.2,
                                 "poll_fallback_sec": 1, "default_lease_ttl_sec": 5}
    values.update(overrides)
    return Settings(**values)  # type: ignore[arg-type]


@pytest.fixture
async def pdb(db: asyncpg.Pool) -> AsyncIterator[asyncpg.Pool]:
    """The pool, with processes and the queue emptied before the test."""
    await db.execute(f"TRUNCATE {PROCESS_TABLES}")
    yield db


@pytest.fixture
async def app(pdb: asyncpg.Pool, dsn: str) -> AsyncIterator[App]:
    async with App(process_settings(dsn)) as opened:
        yield opened


@pytest.fixture
async def client(app: App, ns: str) -> AsyncIterator[httpx.AsyncClient]:
    """An HTTP client of the app's API, its workers running and the test processor on `ns`."""
    from tests.processes.processors import register

    register(ns)
    async with app.running(), httpx.AsyncClient(
            transport=httpx.ASGITransport(app=create_app(app.settings, context=app)), base_url="http://t") as c:
        yield c
