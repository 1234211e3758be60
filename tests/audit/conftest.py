"""The audit trail's tests: one App on the test database for the module, the trail emptied before
each test, and helpers that read it back."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import asyncpg
import pytest

from dataloader.app import App
from dataloader.config import Settings
from dataloader.processes.registry import processors

MODULES = "tests.support.pipelines,tests.support.observers,tests.workflows.flows"


def audit_settings(dsn: str, **overrides: Any) -> Settings:
    return Settings(db_dsn=dsn, pipeline_modules=MODULES, api_token=None, log_format="json",  # type: ignore[arg-type]
                    **overrides)


@pytest.fixture
async def trail(db: asyncpg.Pool) -> AsyncIterator[asyncpg.Pool]:
    """The pool, with the audit trail (and the jobs, by `db`) emptied before the test."""
    await db.execute("TRUNCATE dl_audit")
    yield db


@pytest.fixture(scope="session")
async def audit_app(dsn: str) -> AsyncIterator[App]:
    app = await App(audit_settings(dsn)).open()
    yield app
    await app.close()


@pytest.fixture
def name() -> Iterator[str]:
    """A fresh name for what a test creates (queues, schedules, observers, processes). A processor
    registered under it is unregistered afterwards: the registry is the process's, and a later
    test's `running()` would serve its `process:<name>` queue too."""
    ns = f"a{uuid.uuid4().hex[:10]}"
    yield ns
    processors.unregister(ns)


async def rows(pool: asyncpg.Pool) -> list[dict[str, Any]]:
    return [dict(r) for r in await pool.fetch("SELECT * FROM dl_audit ORDER BY ts, id")]
