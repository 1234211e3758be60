"""`app.workflows.result` waits on a notification, not by polling: the run's end sends
`NOTIFY dl_workflow_end` in its own transaction (migration 0037's trigger), heard on the node's one
listening session — also by an App that only produces (no workers). Checked by counting the reads
the waiting App makes (its repository's calls), never by timing; a notification lost while the
session was down is made good when it comes back (on_missed: read again). A plain job's finish
does not call the trigger at all."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from typing import Any

import asyncpg
import pytest

from dataloader import App
from tests.conftest import wait_until
from tests.workflows.conftest import workflow_settings

# Long enough that no fallback poll falls inside a test: every read counted is the first one or one a
# notification (or the listener's return) caused.
FALLBACK_POLL_SEC = 120


@pytest.fixture
async def producer(wdb: asyncpg.Pool, dsn: str) -> AsyncIterator[App]:
    """An App with no workers: it starts runs and waits for their results, nothing more."""
    async with App(workflow_settings(dsn, workers=[], poll_fallback_sec=FALLBACK_POLL_SEC)) as opened:
        yield opened


@pytest.fixture
async def worker(wdb: asyncpg.Pool, dsn: str) -> AsyncIterator[App]:
    async with App(workflow_settings(dsn)) as opened, opened.running():
        yield opened


class CountedReads:
    """Counts the producer's reads of a run while `result` waits (the statements its session sends)."""

    def __init__(self, app: App) -> None:
        self.calls = 0
        self.first = asyncio.Event()
        repo = app.workflows.repo
        self._real = repo.get_run

        async def counted(run_id: uuid.UUID, **options: Any) -> Any:
            self.calls += 1
            try:
                return await self._real(run_id, **options)
            finally:
                self.first.set()

        repo.get_run = counted  # type: ignore[method-assign]


async def _waits(pool: asyncpg.Pool, run_id: uuid.UUID) -> bool:
    return bool(await pool.fetchval(
        "SELECT EXISTS (SELECT 1 FROM dl_workflow_steps s JOIN dl_jobs j ON j.job_id = s.run_id "
        "WHERE s.run_id = $1 AND s.kind = 'wait' AND s.state = 'pending' AND j.status = 'queued')", run_id))


async def test_result_returns_on_the_runs_end_without_polling(
        producer: App, worker: App, wdb: asyncpg.Pool, dsn: str) -> None:
    run_id = await producer.workflows.start("t.wait", {"dsn": dsn, "timeout": 60})
    reads = CountedReads(producer)
    waiting = asyncio.create_task(producer.workflows.result(run_id, timeout=60))
    await reads.first.wait()
    await wait_until(lambda: _waits(wdb, run_id), timeout=20, message="the run waits for its signal")
    # A window in which a poller would have read again and again (the old 20 ms doubling to 1 s: 7
    # reads in a second). Not synchronisation: nothing here waits for it to happen.
    await asyncio.sleep(1.0)
    assert reads.calls == 1 and not waiting.done(), "nothing was read while the run went on"
    await producer.workflows.signal(run_id, "go", 7)
    assert await asyncio.wait_for(waiting, 30) == {"first": 7, "second": None}
    assert reads.calls == 2, "one read on the notification of its end"
    assert producer.notifier.listening, "the producer's own listening session, without workers"


async def test_result_returns_when_the_notification_is_lost(
        producer: App, worker: App, wdb: asyncpg.Pool, dsn: str) -> None:
    """The run ends while the producer's listening session is gone (terminated, and held from
    reconnecting until then): the NOTIFY of its end reaches nobody; the session's return reads again."""
    run_id = await producer.workflows.start("t.wait", {"dsn": dsn, "timeout": 60})
    reads = CountedReads(producer)
    waiting = asyncio.create_task(producer.workflows.result(run_id, timeout=60))
    await reads.first.wait()
    notifier = producer.notifier
    real_connect = notifier._connect_fn
    back = asyncio.Event()

    async def held_connect() -> asyncpg.Connection:
        await back.wait()
        return await real_connect()

    notifier._connect_fn = held_connect
    reconnects = notifier.reconnects
    await wdb.execute("SELECT pg_terminate_backend($1)", notifier.backend_pid)
    await wait_until(lambda: not notifier.listening, timeout=20, message="the listening session is gone")
    await wait_until(lambda: _waits(wdb, run_id), timeout=20, message="the run waits for its signal")
    await producer.workflows.signal(run_id, "go", 8)
    await wait_until(lambda: _succeeded(wdb, run_id), timeout=20, message="the run ended, unheard")
    back.set()
    assert await asyncio.wait_for(waiting, 30) == {"first": 8, "second": None}
    await wait_until(lambda: notifier.reconnects > reconnects, timeout=20, message="the notifier reconnected")


async def _succeeded(pool: asyncpg.Pool, run_id: uuid.UUID) -> bool:
    return await pool.fetchval("SELECT status::text FROM dl_jobs WHERE job_id = $1", run_id) == "succeeded"


async def _trigger_calls(pool: asyncpg.Pool, job_id: uuid.UUID) -> dict[str, int]:
    """The triggers an ending UPDATE of `job_id` calls, by EXPLAIN ANALYZE (rolled back)."""
    async with pool.acquire() as conn:
        tx = conn.transaction()
        await tx.start()
        try:
            plan = await conn.fetch("EXPLAIN (ANALYZE, FORMAT TEXT) UPDATE dl_jobs SET status = 'succeeded', "
                                    "finished_at = now() WHERE job_id = $1", job_id)
        finally:
            await tx.rollback()
    calls = {}
    for row in plan:
        line = row[0]
        if line.startswith("Trigger "):
            name = line.split(":")[0].removeprefix("Trigger ")
            calls[name] = int(line.rsplit("calls=", 1)[1])
    return calls


async def test_a_plain_jobs_finish_calls_no_workflow_trigger(producer: App, wdb: asyncpg.Pool, dsn: str) -> None:
    """The run-end notification lives in the workflow trigger, whose WHEN lets a plain job pass
    without a call: a plain job's finish is the statement it was; a run's calls it once."""
    plain = await producer.enqueue("plain.task", {}, queue="wf-plain")
    run_id = await producer.workflows.start("t.wait", {"dsn": dsn})
    for job_id in (plain.id, run_id):
        await wdb.execute("UPDATE dl_jobs SET status = 'running', attempt = 1, started_at = now() WHERE job_id = $1",
                          job_id)
    assert "dl_workflow_child_end" not in await _trigger_calls(wdb, plain.id)
    assert (await _trigger_calls(wdb, run_id)).get("dl_workflow_child_end") == 1
