"""Fixtures of the flow tests."""

from __future__ import annotations

from collections.abc import AsyncIterator

import asyncpg
import pytest


@pytest.fixture
async def counted_claims(db: asyncpg.Pool) -> AsyncIterator[None]:
    """track_functions = 'pl' for the sessions opened from now on (the nodes'), reset afterwards."""
    database = await db.fetchval("SELECT current_database()")
    await db.execute(f'ALTER DATABASE "{database}" SET track_functions = \'pl\'')
    try:
        yield
    finally:
        await db.execute(f'ALTER DATABASE "{database}" RESET track_functions')
