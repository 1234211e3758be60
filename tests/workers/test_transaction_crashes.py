"""ctx.transaction() under kill -9, with real worker processes: the pipeline's business row and
its job's `succeeded` commit together or not at all.

`test.tx_business` marks (in `test_marks`, on a connection of its own) that it reached a point and,
on attempt 1, waits there to be killed: (a) `before` its transaction, (b) `after_writes` (its row
written, not committed), (c) `after_commit`. At every look the test takes, in one statement (one
snapshot), there is a business row exactly when the job is `succeeded`. After the kill, (a) and
(b) run again on another worker and end with exactly one row; (c) stays succeeded with its one
row and never runs again."""

from __future__ import annotations

import signal
import uuid

import pytest

from tests.conftest import wait_until
from tests.support.engine import enqueue, job_row
from tests.support.pipelines import TX_DDL


@pytest.fixture
async def business(db):
    await db.execute(TX_DDL)
    await db.execute("TRUNCATE test_business, test_marks RESTART IDENTITY")
    return db


async def _consistent_state(db, job_id: uuid.UUID) -> tuple[str, int]:
    """(status, business rows) read in one statement, checked: never one without the other."""
    row = await db.fetchrow("SELECT (SELECT status::text FROM dl_jobs WHERE job_id = $1) AS status, "
                            "(SELECT count(*) FROM test_business WHERE job_id = $1) AS rows", job_id)
    status, rows = row["status"], row["rows"]
    assert rows <= 1, f"{rows} business rows for one job"
    assert (status == "succeeded") == (rows == 1), f"job {status} with {rows} business rows"
    return status, rows


async def _reached(db, job_id: uuid.UUID, point: str) -> bool:
    await _consistent_state(db, job_id)
    return bool(await db.fetchval("SELECT count(*) FROM test_marks WHERE job_id = $1 AND attempt = 1 AND point = $2",
                                  job_id, point))


async def _succeeded(db, job_id: uuid.UUID) -> bool:
    status, _ = await _consistent_state(db, job_id)
    return status == "succeeded"


@pytest.mark.parametrize("point", ["before", "after_writes"])
async def test_kill_9_before_the_commit_runs_the_job_again_with_one_row(dsn, business, workers, point):
    db = business
    victim = workers(queues={"default": 1}, heartbeat_sec=0.3)
    await victim.wait_ready()
    job_id = await enqueue(db, "test.tx_business", lease_ttl_sec=2, args={"dsn": dsn, "pause_at": point})
    await wait_until(lambda: _reached(db, job_id, point), timeout=15)
    victim.signal(signal.SIGKILL)
    assert await victim.wait_exit() == -signal.SIGKILL
    # the uncommitted row died with the connection; nobody told the queue
    assert await _consistent_state(db, job_id) == ("running", 0)

    rescuer = workers(queues={"default": 1}, heartbeat_sec=0.3, reaper_period_sec=0.3)
    await rescuer.wait_ready()
    await wait_until(lambda: _succeeded(db, job_id), timeout=20)
    rows = await db.fetch("SELECT attempt, pid FROM test_business WHERE job_id = $1", job_id)
    assert [(r["attempt"], r["pid"]) for r in rows] == [(2, rescuer.pid)]
    assert (await job_row(db, job_id))["attempt"] == 2
    kinds = await db.fetch("SELECT kind, payload FROM dl_job_events WHERE job_id = $1 AND kind <> 'heartbeat' "
                           "ORDER BY event_id", job_id)
    assert [k["kind"] for k in kinds] == ["queued", "picked", "requeue", "picked", "done"]
    assert kinds[-1]["payload"] == {"attempt": 2, "transaction": True}


async def test_kill_9_after_the_commit_keeps_the_job_succeeded_and_never_runs_it_again(dsn, business, workers):
    db = business
    victim = workers(queues={"default": 1}, heartbeat_sec=0.3)
    await victim.wait_ready()
    job_id = await enqueue(db, "test.tx_business", lock_key="tx-crash", lease_ttl_sec=2,
                           args={"dsn": dsn, "pause_at": "after_commit"})
    await wait_until(lambda: _reached(db, job_id, "after_commit"), timeout=15)
    victim.signal(signal.SIGKILL)
    assert await victim.wait_exit() == -signal.SIGKILL
    assert await _consistent_state(db, job_id) == ("succeeded", 1)

    # A worker with a reaper, and a later job of the same lock_key: once that one has run (so the
    # key was free and the queue was read after the kill), the first job is still as it was.
    rescuer = workers(queues={"default": 1}, heartbeat_sec=0.3, reaper_period_sec=0.3)
    await rescuer.wait_ready()
    follower = await enqueue(db, "test.tx_business", lock_key="tx-crash", args={"dsn": dsn})
    await wait_until(lambda: _succeeded(db, follower), timeout=20)
    assert await _consistent_state(db, job_id) == ("succeeded", 1)
    row = await job_row(db, job_id)
    assert row["attempt"] == 1
    runs = await db.fetch("SELECT attempt, point FROM test_marks WHERE job_id = $1 ORDER BY id", job_id)
    assert [(r["attempt"], r["point"]) for r in runs] == [(1, "before"), (1, "after_writes"), (1, "after_commit")]
    kinds = await db.fetch("SELECT kind FROM dl_job_events WHERE job_id = $1 AND kind <> 'heartbeat' "
                           "ORDER BY event_id", job_id)
    assert [k["kind"] for k in kinds] == ["queued", "picked", "done"]
