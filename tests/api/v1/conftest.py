"""Fixtures for the HTTP API tests: one App on the test database for the whole run, apps
built around it with `create_app(context=...)`, and in-process workers where a test needs them."""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator, Iterator

import asyncpg
import httpx
import pytest

from dataloader.api import create_app
from dataloader.app import App
from dataloader.config import Settings
from dataloader.workers.manager import WorkerManager
from tests.api.v1.constants import MAX_ARGS_BYTES, WORKER_QUEUE
from tests.support.api_apps import api_for


def api_settings(dsn: str, **overrides: object) -> Settings:
    values: dict[str, object] = {
        "db_dsn": dsn,
        "workers_json": json.dumps([{"queue": WORKER_QUEUE, "concurrency": 2}]),
        "heartbeat_sec": 0.1,
        "reaper_period_sec": 0.5,
        "poll_fallback_sec": 1.0,
        "shutdown_timeout_sec": 5,
        "claim_backoff_sec": 0.2,
        "max_args_bytes": MAX_ARGS_BYTES,
        "pipeline_modules": "tests.support.pipelines",
        "api_token": None,
        "log_format": "json",
        # a user's password hash at argon2's lowest cost: the users routes fuzzed cost ms, not 0.5 s each
        "password_hash_time_cost": 1,
        "password_hash_memory_kib": 64,
    }
    values.update(overrides)
    return Settings(**values)  # type: ignore[arg-type]


@pytest.fixture(scope="session")
async def app_ctx(dsn: str) -> AsyncIterator[App]:
    # db_dsn is set, so this starts no server: it migrates (already at head) and opens a pool.
    ctx = await App(api_settings(dsn)).open()
    yield ctx
    await ctx.close()


def client_for(app) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://dataloader.test")


@pytest.fixture
async def client(db: asyncpg.Pool, app_ctx: App) -> AsyncIterator[httpx.AsyncClient]:
    """An app without workers in this process (jobs stay queued)."""
    async with client_for(api_for(app_ctx)) as c:
        yield c


@pytest.fixture
async def manager(db: asyncpg.Pool, app_ctx: App) -> AsyncIterator[WorkerManager]:
    async with app_ctx.running() as workers:
        yield workers


@pytest.fixture
async def worker_client(manager: WorkerManager, app_ctx: App) -> AsyncIterator[httpx.AsyncClient]:
    """An app whose process runs workers for WORKER_QUEUE."""
    async with client_for(create_app(app_ctx.settings, context=app_ctx, manager=manager)) as c:
        yield c


async def table_counts(pool: asyncpg.Pool) -> tuple[int, int]:
    return (await pool.fetchval("SELECT count(*) FROM dl_jobs"),
            await pool.fetchval("SELECT count(*) FROM dl_job_events"))


_CONTENT_QUERY: list[str] = []  # the one statement that reads every dl_* table (one test database per run)


async def tables_content(pool: asyncpg.Pool) -> dict[str, tuple[int, str]]:
    """Every dl_* table's rows, as (count, md5 of the rows as text in a fixed order): equal before and
    after means no row was added, removed or changed in any of them (jobs, journal, processes,
    schedules, observers, nodes, operations... and any table a later migration adds)."""
    if not _CONTENT_QUERY:
        names = [r["tablename"] for r in await pool.fetch(
            "SELECT tablename FROM pg_tables WHERE schemaname = current_schema() AND tablename LIKE 'dl\\_%' "
            "ORDER BY tablename")
            # the audit trail's `refused` row is the record of a refusal, not a change it made
            if r["tablename"] != "dl_audit"]
        assert "dl_jobs" in names and "dl_schedules" in names and "dl_observers" in names
        _CONTENT_QUERY.append(" UNION ALL ".join(
            f"SELECT '{name}' AS name, count(*) AS n, "
            f"md5(coalesce(string_agg(t::text, E'\\n' ORDER BY t::text), '')) AS digest FROM {name} t"
            for name in names))
    return {r["name"]: (r["n"], r["digest"]) for r in await pool.fetch(_CONTENT_QUERY[0])}


async def next_xid(pool: asyncpg.Pool) -> int:
    """The server's next transaction id, read without taking one. Every write to a table (insert,
    update, delete, truncate) takes an id, and a request's transactions have ended when its response
    is back: while this has not moved, no row of any table has changed."""
    return int(await pool.fetchval("SELECT pg_snapshot_xmax(pg_current_snapshot())::text"))


async def sessions_of_the_server(pool: asyncpg.Pool) -> list[tuple[object, ...]]:
    """Every other client session of the server, in any database: what may have taken an id when
    `next_xid` moved (the id is the whole server's)."""
    rows = await pool.fetch(
        "SELECT datname, application_name, state, backend_xid::text, left(query, 160) AS query, "
        "clock_timestamp() - state_change AS since FROM pg_stat_activity "
        "WHERE backend_type = 'client backend' AND pid <> pg_backend_pid() ORDER BY state_change DESC")
    return [tuple(r.values()) for r in rows]


class TablesAt:
    """`tables_content` with its last reading kept while the next transaction id stays put: reading
    every dl_* table costs the server more the longer the worker's session has run, and a run of
    refused requests changes nothing."""

    def __init__(self) -> None:
        self._xid: int | None = None
        self._content: dict[str, tuple[int, str]] = {}

    async def read(self, pool: asyncpg.Pool) -> tuple[int, dict[str, tuple[int, str]]]:
        """(the next transaction id before the reading, the content)."""
        xid = await next_xid(pool)
        if xid != self._xid:
            content = await tables_content(pool)
            # kept only when nothing wrote meanwhile, so it is the content at exactly that id
            self._xid, self._content = (xid, content) if await next_xid(pool) == xid else (None, {})
            return xid, content
        return xid, self._content


@pytest.fixture(autouse=True)
def log_at_info() -> Iterator[None]:
    """Run with INFO enabled, as the service does, so every log call on the request path executes
    (a broken `extra=` only fails when the record is actually built)."""
    root = logging.getLogger()
    old = root.level
    root.setLevel(logging.INFO)
    yield
    root.setLevel(old)
