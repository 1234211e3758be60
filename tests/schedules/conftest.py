from __future__ import annotations

from collections.abc import AsyncIterator

import asyncpg
import pytest

from dataloader.schedules.declare import _DECLARED
from tests.support.database import reset_tables


@pytest.fixture
async def sdb(pool: asyncpg.Pool) -> AsyncIterator[asyncpg.Pool]:
    """The pool, with schedules, their history and the queue emptied before the test."""
    await reset_tables(pool, "TRUNCATE dl_schedules, dl_schedule_runs, dl_jobs, dl_job_events RESTART IDENTITY CASCADE")
    saved = list(_DECLARED)
    yield pool
    _DECLARED[:] = saved
