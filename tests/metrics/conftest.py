"""Fixtures of the observability tests: an App on the test database with the HTTP face in front of
it (the real /metrics route, in process), and the page it serves parsed into samples."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

import asyncpg
import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from dataloader.api import create_app
from dataloader.app import App
from dataloader.config import Settings

QUEUE = "obs-q"

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def obs_settings(dsn: str, **overrides: object) -> Settings:
    values: dict[str, object] = {
        "db_dsn": dsn,
        "workers_json": json.dumps([{"queue": QUEUE, "concurrency": 2}]),
        "heartbeat_sec": 0.1,
        "reaper_period_sec": 0.3,
        "poll_fallback_sec": 1.0,
        "shutdown_timeout_sec": 5,
        "pipeline_modules": "tests.support.pipelines",
        "api_token": None,
        "log_format": "json",
        "db_xmin_warn_sec": 1.0,
    }
    values.update(overrides)
    return Settings(**values)  # type: ignore[arg-type]


def parse(text: str) -> Samples:
    """Every sample of a Prometheus text page, keyed by (name, sorted labels)."""
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def value(page: Samples, name: str, **labels: str) -> float | None:
    return page.get((name, tuple(sorted(labels.items()))))


@pytest.fixture
async def obs_app(dsn: str, db: asyncpg.Pool) -> AsyncIterator[App]:
    """An App of its own per test: its health reader (and its warning's rate limit) starts fresh."""
    app = await App(obs_settings(dsn)).open()
    yield app
    await app.close()


@pytest.fixture
async def scrape(obs_app: App) -> AsyncIterator:
    """`await scrape()` → the samples of one GET /metrics (asserting it answered 200)."""
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=create_app(obs_app.settings, context=obs_app)),
                                 base_url="http://dataloader.test") as client:
        async def get() -> Samples:
            response = await client.get("/metrics")
            assert response.status_code == 200, response.text
            return parse(response.text)

        yield get


@pytest.fixture
async def db(db):
    """The suite's `db`, and without processes and observers: the alerts read every one of them in the
    database, and an earlier test of this xdist worker may have left some in error or waiting (a
    console test's `console-pay` processes, a chaos self-test's observer), which would fire alerts a
    test here does not expect."""
    from tests.support.database import reset_tables

    await reset_tables(db, "TRUNCATE dl_processes, dl_process_tasks, dl_process_events, dl_process_feed, "
                           "dl_observers CASCADE")
    return db
