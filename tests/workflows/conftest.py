from __future__ import annotations

from collections.abc import AsyncIterator

import asyncpg
import pytest

from dataloader import App, Queue, Settings
from tests.workflows.flows import PROBE_DDL, QUEUE


def workflow_settings(dsn: str, **overrides: object) -> Settings:
    values: dict[str, object] = {"db_dsn": dsn, "workers": [Queue(QUEUE, 8)], "heartbeat_sec": 0.2,
                                 "poll_fallback_sec": 1, "default_lease_ttl_sec": 5, "reaper_period_sec": 0.5}
    values.update(overrides)
    return Settings(**values)  # type: ignore[arg-type]


@pytest.fixture
async def wdb(db: asyncpg.Pool) -> AsyncIterator[asyncpg.Pool]:
    """The pool, with the queue (and with it every run, step and signal) and the probe emptied."""
    await db.execute(PROBE_DDL)
    await db.execute("TRUNCATE wf_probe")
    yield db


@pytest.fixture
async def app(wdb: asyncpg.Pool, dsn: str) -> AsyncIterator[App]:
    async with App(workflow_settings(dsn)) as opened:
        yield opened


async def probe_counts(pool: asyncpg.Pool, run_id: object) -> dict[str, int]:
    rows = await pool.fetch("SELECT step, count(*) AS n FROM wf_probe WHERE run_id = $1 GROUP BY step",
                            str(run_id))
    return {r["step"]: r["n"] for r in rows}
