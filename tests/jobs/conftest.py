from __future__ import annotations

from collections.abc import AsyncIterator

import asyncpg
import pytest

from dataloader import App, Queue, Settings
from tests.jobs import pipelines

MODULES = "tests.support.pipelines,tests.jobs.pipelines"


def settings_for(dsn: str) -> Settings:
    return Settings(db_dsn=dsn, workers=[Queue("q", 4)], pipeline_modules=MODULES,
                    heartbeat_sec=0.2, poll_fallback_sec=1, shutdown_timeout_sec=2)


@pytest.fixture
async def runs(db: asyncpg.Pool) -> asyncpg.Pool:
    await db.execute(pipelines.RUNS_DDL)
    await db.execute("TRUNCATE pattern_runs")
    return db


@pytest.fixture
async def app(runs: asyncpg.Pool, dsn: str) -> AsyncIterator[App]:
    async with App(settings_for(dsn)) as opened:
        yield opened
