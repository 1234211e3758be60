"""Claiming ahead (DL_CLAIM_AHEAD, workers/claim_ahead.py): while a queue's jobs run shorter than a
claim takes, a worker holds up to that many jobs claimed beyond its concurrency, started as slots
free. Never more than the concurrency executing at once; a job claimed ahead that cannot start
goes back unstarted (shutdown, a heartbeat period without a slot, a cancel), in its place in line
and with its attempt not counted."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from dataloader import metrics
from dataloader.workers.claim_ahead import ClaimAhead
from dataloader.workers.pipelines.registry import pipeline
from tests.conftest import wait_until
from tests.support.engine import enqueue, event_kinds, job_row, job_service, running_engine

_executing: dict[str, int] = {}
_most_executing: dict[str, int] = {}
_most_ahead: dict[str, float] = {}


@pipeline("test.claim_ahead_counted")
async def counted(ctx) -> None:
    """A short job that records how many of its queue's jobs execute at once, and how many this
    process holds claimed ahead while it runs."""
    queue = ctx.queue
    _executing[queue] = _executing.get(queue, 0) + 1
    _most_executing[queue] = max(_most_executing.get(queue, 0), _executing[queue])
    ahead = metrics.CLAIMED_AHEAD.labels(queue)._value.get()
    _most_ahead[queue] = max(_most_ahead.get(queue, 0), ahead)
    await asyncio.sleep(0)
    _executing[queue] -= 1


# -- the allowance, pure ---------------------------------------------------------------------------

@pytest.mark.unit
def test_the_allowance_is_closed_until_runs_and_claims_were_seen():
    gate = ClaimAhead(8)
    assert gate.allowance() == 0
    gate.ran(0.0001)
    assert gate.allowance() == 0
    gate.claimed(0.003)
    assert gate.allowance() == 8


@pytest.mark.unit
def test_long_runs_close_the_allowance_and_short_ones_reopen_it():
    gate = ClaimAhead(8)
    gate.claimed(0.003)
    gate.ran(0.0001)
    assert gate.is_open
    gate.ran(0.5)  # one job ran far longer than a claim: closed at once
    assert gate.allowance() == 0
    reopened_after = next(n for n in range(1, 200) if (gate.ran(0.0001), gate.is_open)[1])
    assert 5 < reopened_after < 50


@pytest.mark.unit
def test_a_limit_of_zero_never_claims_ahead():
    gate = ClaimAhead(0)
    gate.claimed(1.0)
    gate.ran(0.0)
    assert gate.allowance() == 0 and not gate.is_open


@pytest.mark.unit
async def test_giving_back_during_a_step_starts_nothing_and_frees_no_slot():
    """A stop (or a switch to limits) while a step is in flight gives back every job claimed ahead:
    a give-back's own submit must not start the next job claimed ahead in a free slot (it would be
    started and given back at once), and a job given back never counts as a slot's finish."""
    from dataloader.config import Settings
    from dataloader.storage.queue_connection import ClaimedJob
    from dataloader.workers.claim_ahead import AheadJob
    from dataloader.workers.env import EngineEnv
    from dataloader.workers.queue_worker import QueueWorker

    env = EngineEnv(pool=None, repo=None, registry=None, settings=Settings(db_dsn="postgresql://unused/x"),
                    worker_name="unit")  # type: ignore[arg-type]
    worker = QueueWorker("q", 2, env)
    jobs = [ClaimedJob(job_id=uuid.uuid4(), queue="q", task="t", args={}, lock_key=f"k{i}", partition_key="",
                       lease_ttl_sec=60, attempt=1, max_attempts=3, wait_sec=0.0, lock_hash=i) for i in range(3)]
    for job in jobs:
        worker._ahead[job.job_id] = AheadJob(job, 0.0, 0.0)
    worker._in_step = True  # the stop comes from another task while the step awaits the database
    await worker.stop_claiming()
    assert worker.running == {} and worker._ahead == {}
    assert [r.job_id for r, _ in worker.completer._pending] == [j.job_id for j in jobs]
    assert all(r.outcome == "release" and r.reason == "claimed_ahead" for r, _ in worker.completer._pending)
    assert worker._busy_slots() == 0  # three finishes pending, none of them a slot's


# -- the worker ------------------------------------------------------------------------------------

def _queue() -> str:
    return f"ahead-{uuid.uuid4().hex[:8]}"


async def _succeeded(db, job_ids) -> bool:
    n = await db.fetchval("SELECT count(*) FROM dl_jobs WHERE job_id = ANY($1) AND status = 'succeeded'", job_ids)
    return n == len(job_ids)


async def _running(db, queue: str) -> int:
    return await db.fetchval("SELECT count(*) FROM dl_jobs WHERE queue = $1 AND status = 'running'", queue)


async def _open_the_allowance(db, queue: str) -> None:
    """Short jobs first: the worker has seen runs shorter than its claims."""
    jobs = [await enqueue(db, "test.claim_ahead_counted", queue=queue) for _ in range(20)]
    await wait_until(lambda: _succeeded(db, jobs), timeout=20)


async def _last_event(db, job_id):
    return await db.fetchrow("SELECT kind, payload FROM dl_job_events WHERE job_id = $1 ORDER BY event_id DESC LIMIT 1",
                             job_id)


async def test_short_jobs_are_claimed_ahead_and_never_execute_beyond_the_concurrency(dsn, db):
    queue = _queue()
    async with running_engine(dsn, db, {queue: 2}, claim_ahead=6):
        jobs = await job_service(db).trigger_many([_request(queue) for _ in range(300)])
        await wait_until(lambda: _succeeded(db, jobs), timeout=60)
    assert _most_executing[queue] <= 2
    assert _most_ahead[queue] > 0  # some ran while others waited claimed ahead
    # each ran once: no job was given back or claimed twice
    rows = await db.fetch("SELECT attempt, count(*) AS n FROM dl_jobs WHERE job_id = ANY($1) GROUP BY attempt", jobs)
    assert [(r["attempt"], r["n"]) for r in rows] == [(1, 300)]
    assert set(map(tuple, [await event_kinds(db, j) for j in jobs[:20]])) == {("queued", "picked", "done")}


async def test_claim_ahead_zero_claims_for_free_slots_only(dsn, db):
    queue = _queue()
    async with running_engine(dsn, db, {queue: 2}, claim_ahead=0):
        jobs = await job_service(db).trigger_many([_request(queue) for _ in range(100)])
        await wait_until(lambda: _succeeded(db, jobs), timeout=60)
    assert _most_ahead.get(queue, 0) == 0 and _most_executing[queue] <= 2


async def test_jobs_claimed_ahead_go_back_unstarted_at_shutdown_in_their_place(dsn, db):
    queue = _queue()
    async with running_engine(dsn, db, {queue: 1}, claim_ahead=3, shutdown_timeout_sec=10):
        await _open_the_allowance(db, queue)
        slow = await enqueue(db, "test.async_unaware", queue=queue, args={"seconds": 1.5})
        await wait_until(lambda: _running_is(db, slow), timeout=10)
        waiting = [await enqueue(db, "test.claim_ahead_counted", queue=queue) for _ in range(3)]
        before = {j: (await job_row(db, j))["available_at"] for j in waiting}
        await wait_until(lambda: _running_count_is(db, queue, 4), timeout=10)
    # leaving the block stopped the engine: the slow job finished its work, the others went back
    assert (await job_row(db, slow))["status"] == "succeeded"
    for job_id in waiting:
        row = await job_row(db, job_id)
        assert (row["status"], row["attempt"], row["started_at"]) == ("queued", 0, None)
        assert row["available_at"] == before[job_id]  # its place in line
        assert await event_kinds(db, job_id) == ["queued", "picked", "requeue"]
        assert (await _last_event(db, job_id))["payload"]["reason"] == "claimed_ahead"


async def test_a_job_claimed_ahead_that_waits_a_heartbeat_period_goes_back_and_runs_later(dsn, db):
    queue = _queue()
    returned = metrics.CLAIM_AHEAD_RETURNED.labels(queue, "waited")
    async with running_engine(dsn, db, {queue: 1}, claim_ahead=2, heartbeat_sec=0.5):
        await _open_the_allowance(db, queue)
        slow = await enqueue(db, "test.async_sleep", queue=queue, args={"seconds": 3})
        await wait_until(lambda: _running_is(db, slow), timeout=10)
        waiting = [await enqueue(db, "test.claim_ahead_counted", queue=queue) for _ in range(2)]
        await wait_until(lambda: _running_count_is(db, queue, 3), timeout=10)
        # a heartbeat period later they are queued again, and stay so while the slow job runs
        await wait_until(lambda: _running_count_is(db, queue, 1), timeout=10)
        assert returned._value.get() == 2
        assert (await job_row(db, slow))["status"] == "running"
        await wait_until(lambda: _succeeded(db, [slow, *waiting]), timeout=20)
    for job_id in waiting:
        kinds = [k for k in await event_kinds(db, job_id) if k != "heartbeat"]  # renewed while it waited
        assert kinds == ["queued", "picked", "requeue", "picked", "done"]
        assert (await job_row(db, job_id))["attempt"] == 1


async def test_a_cancel_of_a_job_claimed_ahead_ends_it_without_running_it(dsn, db):
    queue = _queue()
    async with running_engine(dsn, db, {queue: 1}, claim_ahead=2):
        await _open_the_allowance(db, queue)
        slow = await enqueue(db, "test.async_sleep", queue=queue, args={"seconds": 2})
        await wait_until(lambda: _running_is(db, slow), timeout=10)
        doomed = await enqueue(db, "test.async_sleep", queue=queue, args={"seconds": 30})
        await wait_until(lambda: _running_is(db, doomed), timeout=10)
        await job_service(db).cancel(doomed)
        await wait_until(lambda: _status_is(db, doomed, "canceled"), timeout=10)
        assert (await job_row(db, slow))["status"] == "running"  # it was never in a slot
    row = await job_row(db, doomed)
    assert (row["status"], row["attempt"]) == ("canceled", 0)
    assert await event_kinds(db, doomed) == ["queued", "picked", "cancel_requested", "canceled"]


async def test_jobs_claimed_ahead_go_back_when_the_control_connection_is_lost(dsn, db):
    """The session holding their lock_keys ended: the new one retakes only the running attempt's
    lock, so the jobs claimed ahead go back (and run later, once each) instead of running unlocked."""
    queue = _queue()
    returned = metrics.CLAIM_AHEAD_RETURNED.labels(queue, "reconnect")
    async with running_engine(dsn, db, {queue: 1}, claim_ahead=2, heartbeat_sec=5):
        await _open_the_allowance(db, queue)
        slow_key = uuid.uuid4().hex
        slow = await enqueue(db, "test.async_sleep", queue=queue, lock_key=slow_key, args={"seconds": 2})
        await wait_until(lambda: _running_is(db, slow), timeout=10)
        waiting = [await enqueue(db, "test.claim_ahead_counted", queue=queue) for _ in range(2)]
        await wait_until(lambda: _running_count_is(db, queue, 3), timeout=10)
        control = await db.fetchval(
            "SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted"
            " AND objid = (hashtext($1)::bigint & 4294967295)::oid", slow_key)
        assert await db.fetchval("SELECT pg_terminate_backend($1)", control)
        await wait_until(lambda: _succeeded(db, [slow, *waiting]), timeout=30)
        assert returned._value.get() == 2
    for job_id in waiting:
        kinds = [k for k in await event_kinds(db, job_id) if k != "heartbeat"]
        assert kinds == ["queued", "picked", "requeue", "picked", "done"]
        assert (await job_row(db, job_id))["attempt"] == 1


def _request(queue: str):
    from dataloader.jobs.manager import JobRequest
    return JobRequest(queue=queue, task="test.claim_ahead_counted", lock_key=uuid.uuid4().hex)


async def _status_is(db, job_id, status) -> bool:
    return (await job_row(db, job_id))["status"] == status


async def _running_is(db, job_id) -> bool:
    return await _status_is(db, job_id, "running")


async def _running_count_is(db, queue: str, n: int) -> bool:
    return await _running(db, queue) == n
