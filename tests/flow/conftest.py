"""Fixtures of the flow tests."""

from __future__ import annotations

from collections.abc import AsyncIterator

import asyncpg
import pytest

from dataloader import App, Settings


@pytest.fixture
async def counted_claims(db: asyncpg.Pool) -> AsyncIterator[None]:
    """track_functions = 'pl' for the sessions opened from now on (the nodes'), reset afterwards."""
    database = await db.fetchval("SELECT current_database()")
    await db.execute(f'ALTER DATABASE "{database}" SET track_functions = \'pl\'')
    try:
        yield
    finally:
        await db.execute(f'ALTER DATABASE "{database}" RESET track_functions')


@pytest.fixture
async def app(db, dsn: str) -> AsyncIterator[App]:
    """An App with no workers, whose claims a test drives itself (a test module may define its own)."""
    app = await App(Settings(db_dsn=dsn, workers=[], pipeline_modules="tests.support.pipelines")).open()
    try:
        yield app
    finally:
        await app.close()


@pytest.fixture
async def conns(dsn: str) -> AsyncIterator[list[asyncpg.Connection]]:
    """Two connections of their own, for a claim held open beside another (a claim's advisory locks
    are session locks: closed at the end)."""
    opened = [await asyncpg.connect(dsn) for _ in range(2)]
    try:
        yield opened
    finally:
        for c in opened:
            await c.close()
