from __future__ import annotations

from collections.abc import AsyncIterator

import asyncpg
import pytest

from dataloader.app import App
from dataloader.config import Queue, Settings


def ops_settings(dsn: str, **overrides: object) -> Settings:
    values: dict[str, object] = {"db_dsn": dsn, "workers": [Queue("ops-q", 2)], "heartbeat_sec": 0.2,
                                 "poll_fallback_sec": 1, "pipeline_modules": "tests.support.pipelines",
                                 "retention_enabled": False, "stats_enabled": False}
    values.update(overrides)
    return Settings(**values)  # type: ignore[arg-type]


@pytest.fixture
async def app_on_db(db: asyncpg.Pool, dsn: str) -> AsyncIterator[App]:
    await db.execute("TRUNCATE dl_operations, dl_operation_events")
    async with App(ops_settings(dsn)) as opened:
        yield opened
