"""Jobs waiting behind a running lock_key are parked out of the claim's walk (issue 13, migration
0017): the holder parks them, every path that frees the key unparks its head, the reaper sweeps
keys left parked with nothing running, and jobs of one key still run in claim order."""

import datetime as dt
import itertools
import json
import signal

import asyncpg

from dataloader.jobs.manager import JobRequest
from dataloader.jobs.reaper import Reaper
from dataloader.storage.queue_connection import ClaimedJob, FinishRequest, QueueConnection, claim_sql
from dataloader.storage.repositories import JobRepository
from tests.conftest import wait_until
from tests.support.engine import enqueue, job_service, running_engine


async def _parked(db) -> int:
    return await db.fetchval("SELECT count(*) FROM dl_jobs WHERE status = 'queued' AND key_parked")


async def _take(conn: asyncpg.Connection, limit: int = 8) -> list[ClaimedJob]:
    return (await QueueConnection(conn).claim("default", "test", limit)).claimed


async def _park_all(conn: asyncpg.Connection, holder: ClaimedJob, batch: int = 8) -> int:
    total = 0
    while True:
        parked = await QueueConnection(conn).park_key_waiters(holder.job_id, holder.attempt, batch)
        total += parked
        if parked < batch:
            return total


async def _succeed(conn: asyncpg.Connection, job: ClaimedJob) -> None:
    result = await QueueConnection(conn).finish_one(FinishRequest(
        job_id=job.job_id, attempt=job.attempt, outcome="succeeded", lock_key=job.lock_key, unlock=True))
    assert result.status == "succeeded"


async def test_holder_parks_the_backlog_and_each_finish_unparks_the_next_job_in_order(db):
    hot = [await enqueue(db, lock_key="hot") for _ in range(20)]
    others = [await enqueue(db) for _ in range(3)]
    async with db.acquire() as holder, db.acquire() as other:
        [head] = await _take(holder, 1)
        assert head.job_id == hot[0] and head.key_backlog
        assert await _park_all(holder, head) == 19
        assert await _parked(db) == 19
        # the other keys' claim neither claims nor even looks at the hot key's jobs
        batch = await QueueConnection(other).claim("default", "test", 8)
        assert {j.job_id for j in batch.claimed} == set(others) and not batch.skipped
        for job in batch.claimed:
            await _succeed(other, job)
        # enqueued while the others are parked: one ahead of them in claim order, one behind
        urgent = await enqueue(db, lock_key="hot", priority=0)
        late = await enqueue(db, lock_key="hot")
        ran, current = [head.job_id], head
        while True:
            await _succeed(holder, current)
            # a finish unparks at most one job of the key: the walk stays short
            assert await db.fetchval("SELECT count(*) FROM dl_jobs WHERE lock_key = 'hot' AND status = 'queued' "
                                     "AND NOT key_parked") <= 2
            claimed = await _take(holder)
            if not claimed:
                break
            assert len(claimed) == 1
            current = claimed[0]
            ran.append(current.job_id)
    assert ran == [hot[0], urgent, *hot[1:], late]
    assert await _parked(db) == 0


async def test_one_probe_reports_the_backlog_and_the_jobs_parked_behind_each_claimed_key(db):
    """key_backlog and key_parked_behind come from one scan of the key's queued rows (unparked first,
    at most 16): a lone key reports neither, 16 runnable waiters a backlog (and a hand-over at the
    finish), parked waiters behind fewer than 16 unparked ones a hand-over only; the request id
    comes from the row (0018), not from the journal."""
    lone = (await job_service(db).trigger(JobRequest(queue="default", task="dl.noop", lock_key="lone"),
                                          request_id="req-lone")).job.id
    busy = [await enqueue(db, lock_key="busy") for _ in range(17)]
    await enqueue(db, lock_key="busy", available_at=dt.datetime.now(dt.UTC) + dt.timedelta(hours=1))
    async with db.acquire() as holder:
        claimed = {j.job_id: j for j in await _take(holder)}
        flags = {i: (j.key_backlog, j.key_parked_behind, j.request_id) for i, j in claimed.items()}
        assert flags == {lone: (False, False, "req-lone"), busy[0]: (True, True, None)}
        assert await _park_all(holder, claimed[busy[0]]) == 16
        await db.execute("UPDATE dl_jobs SET key_parked = false WHERE job_id = ANY($1::uuid[])", busy[1:3])
        await _succeed(holder, claimed[busy[0]])
        [second] = await _take(holder)
        assert second.job_id == busy[1]
        # one unparked waiter (busy[2]), 14 parked, the delayed one neither runnable nor parked
        assert (second.key_backlog, second.key_parked_behind) == (False, True)


async def test_jobs_enqueued_while_the_key_runs_are_reported_by_the_heartbeat_for_parking(db):
    first = await enqueue(db, lock_key="hot")
    async with db.acquire() as holder:
        [head] = await _take(holder, 1)
        assert head.job_id == first and not head.key_backlog
        queue = QueueConnection(holder)
        assert await queue.heartbeat_and_backlog([(head.job_id, head.attempt)]) == {head.job_id: (False, False)}
        for _ in range(16):
            await enqueue(db, lock_key="hot")
        assert await queue.heartbeat_and_backlog([(head.job_id, head.attempt)]) == {head.job_id: (False, True)}
        assert await _park_all(holder, head) == 16
        assert await queue.heartbeat_and_backlog([(head.job_id, head.attempt)]) == {head.job_id: (False, False)}
        await _succeed(holder, head)


async def test_a_worker_hands_a_parked_key_over_in_the_step_that_writes_the_finish(dsn, db):
    """The finish that frees a hot key unparks the next job and the same step (one transaction,
    so one now()) claims it: no NOTIFY round trip between a hot key's jobs."""
    hot = [await enqueue(db, lock_key="hot") for _ in range(20)]
    async with running_engine(dsn, db, {"default": 4}):
        await wait_until(lambda: _all_succeeded(db, hot), timeout=20)
    rows = await db.fetch("SELECT job_id, kind, ts FROM dl_job_events WHERE kind IN ('picked', 'done') "
                          "ORDER BY event_id")
    done = {r["job_id"]: r["ts"] for r in rows if r["kind"] == "done"}
    picked = {r["job_id"]: r["ts"] for r in rows if r["kind"] == "picked"}
    assert await db.fetchval("SELECT count(*) FROM dl_jobs WHERE job_id = ANY($1) AND attempt = 1", hot) == 20
    # from the third job on the key's backlog is parked (the first claim reported it)
    same_step = [picked[nxt] == done[prev] for prev, nxt in itertools.pairwise(hot[1:])]
    assert all(same_step), same_step


def _scan_of_claim_order(plan: object) -> dict:
    """The plan node that walks ix_dl_jobs_claim_order."""
    if isinstance(plan, dict):
        if plan.get("Index Name") == "ix_dl_jobs_claim_order":
            return plan
        children = list(plan.values())
    elif isinstance(plan, list):
        children = plan
    else:
        return {}
    for child in children:
        found = _scan_of_claim_order(child)
        if found:
            return found
    return {}


async def _claim_plan_rows(conn: asyncpg.Connection) -> int:
    tr = conn.transaction()
    await tr.start()
    try:
        raw = await conn.fetchval("EXPLAIN (ANALYZE, FORMAT JSON) " + claim_sql(8), "default", "test")
    finally:
        await tr.rollback()
        await conn.execute("SELECT pg_advisory_unlock_all()")
    node = _scan_of_claim_order(json.loads(raw) if isinstance(raw, str) else raw)
    assert node, "the claim no longer walks ix_dl_jobs_claim_order"
    return node["Actual Rows"] + node.get("Rows Removed by Filter", 0)


async def test_claim_with_a_parked_hot_key_does_not_visit_its_rows(db):
    # 2,000 jobs of one key, older than everything else: first in the claim order
    await db.execute(
        "INSERT INTO dl_jobs (job_id, queue, task, lock_key, created_at, available_at) "
        "SELECT gen_random_uuid(), 'default', 'dl.noop', 'hot', now() - interval '1 day' + g * interval '1 ms', "
        "now() - interval '1 day' + g * interval '1 ms' FROM generate_series(1, 2000) g")
    for _ in range(20):
        await enqueue(db)
    await db.execute("ANALYZE dl_jobs")
    async with db.acquire() as holder, db.acquire() as other:
        [head] = await _take(holder, 1)
        assert head.lock_key == "hot" and head.key_backlog
        # before parking, the walk passes every waiting job of the hot key (each rejected)
        assert await _claim_plan_rows(other) >= 1999
        assert await _park_all(holder, head, batch=500) == 1999
        await other.execute("VACUUM dl_jobs")
        assert await _claim_plan_rows(other) <= 8
        await _succeed(holder, head)


async def test_a_key_left_parked_with_nothing_running_is_swept_by_the_reaper(db):
    hot = [await enqueue(db, lock_key="hot") for _ in range(18)]
    async with db.acquire() as holder:
        [head] = await _take(holder, 1)
        assert await _park_all(holder, head) == 17
        # a path that frees the key without unparking (as a crash between a ctx.transaction()
        # commit and the holder's release would leave it)
        await db.execute("UPDATE dl_jobs SET status = 'succeeded', finished_at = now() WHERE job_id = $1", head.job_id)
        await holder.execute("SELECT pg_advisory_unlock_all()")
    assert await Reaper(JobRepository(db), period=1).tick() == 0
    unparked = await db.fetch("SELECT job_id FROM dl_jobs WHERE lock_key = 'hot' AND status = 'queued' "
                              "AND NOT key_parked")
    assert [r["job_id"] for r in unparked] == [hot[1]]
    # a second sweep unparks nothing more: the head is claimable already
    await Reaper(JobRepository(db), period=1).tick()
    assert await _parked(db) == 16


async def test_reaped_holder_frees_its_key_and_the_oldest_parked_job_runs_before_it(db):
    hot = [await enqueue(db, lock_key="hot", lease_ttl_sec=60) for _ in range(17)]
    async with db.acquire() as holder:
        [head] = await _take(holder, 1)
        assert await _park_all(holder, head) == 16
        await db.execute("UPDATE dl_jobs SET lease_expires_at = now() - interval '1 s' WHERE job_id = $1",
                         head.job_id)
        await holder.execute("SELECT pg_advisory_unlock_all()")  # its worker died
    assert await Reaper(JobRepository(db), period=1).tick() == 1
    async with db.acquire() as rescuer:
        # the reaped job queues by its new available_at (now), behind the ones that waited
        [first] = await _take(rescuer)
        assert first.job_id == hot[1]
        await _succeed(rescuer, first)


async def test_canceling_the_head_unparks_the_next_and_a_retried_parked_job_is_claimable(db):
    hot = [await enqueue(db, lock_key="hot") for _ in range(18)]
    async with db.acquire() as holder:
        [head] = await _take(holder, 1)
        assert await _park_all(holder, head) == 17
        service = job_service(db)
        await service.cancel(hot[5])  # a parked job: canceled with its flag set
        await _succeed(holder, head)  # unparks hot[1]
        await service.cancel(hot[1])  # the unparked head: hot[2] must not wait for the sweep
        [nxt] = await _take(holder)
        assert nxt.job_id == hot[2]
        await _succeed(holder, nxt)
    await service.retry(hot[5])
    assert await db.fetchval("SELECT key_parked FROM dl_jobs WHERE job_id = $1", hot[5]) is False


async def test_kill_9_of_the_holder_with_parked_jobs_behind_it_they_all_run_in_order(dsn, db, workers):
    # long enough to be killed mid-run after the holder parked the jobs behind it
    head = await enqueue(db, "test.recorded_sleep", lock_key="hot", lease_ttl_sec=2,
                         args={"dsn": dsn, "seconds": 2, "chunks": 20})
    behind = [await enqueue(db, "test.recorded_sleep", lock_key="hot", args={"dsn": dsn, "seconds": 0.01, "chunks": 1})
              for _ in range(20)]
    victim = workers(queues={"default": 2}, heartbeat_sec=0.3)
    await victim.wait_ready()
    await wait_until(lambda: db.fetchval("SELECT count(*) FROM test_runs WHERE job_id = $1", head), timeout=15)
    await wait_until(lambda: _parked_is(db, 20), timeout=15, message="the holder parks the 20 jobs behind it")
    victim.signal(signal.SIGKILL)
    assert await victim.wait_exit() == -signal.SIGKILL
    rescuer = workers(queues={"default": 2}, heartbeat_sec=0.3, reaper_period_sec=0.3)
    await rescuer.wait_ready()
    ids = [head, *behind]
    await wait_until(lambda: _all_succeeded(db, ids), timeout=40)
    runs = await db.fetch("SELECT job_id, attempt, pid, started_at, ended_at FROM test_runs ORDER BY started_at")
    # the reaped head queued again by its new available_at: behind the jobs that waited for it
    assert [r["job_id"] for r in runs] == [head, *behind, head]
    assert [r["pid"] for r in runs[1:]] == [rescuer.pid] * 21
    for prev, nxt in itertools.pairwise(runs[1:]):  # the killed run never ended
        assert nxt["started_at"] >= prev["ended_at"], "two jobs of one lock_key overlapped"
    assert await _parked(db) == 0


async def _parked_is(db, n: int) -> bool:
    return await _parked(db) == n


async def _all_succeeded(db, ids) -> bool:
    rows = await db.fetch("SELECT status FROM dl_jobs WHERE job_id = ANY($1)", ids)
    return all(r["status"] == "succeeded" for r in rows)
