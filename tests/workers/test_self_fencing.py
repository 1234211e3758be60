"""Self-fencing by time (workers/lease_guard.py): a worker that cannot reach the database stops its
attempts before their leases can run out, so the reaper of the database that comes back (a standby
promoted meanwhile, a long restart) never hands a lock_key to a second holder while the first one
still runs (DESIGN promise 2).

The worker under test reaches PostgreSQL through a proxy that goes silent (tests/support/wire.py):
its statements hang with no error, as when packets are dropped, so nothing but its own clock can
stop its attempt. Another worker, connected directly, takes the job over once the lease ran out."""

from __future__ import annotations

import asyncio
import json
import time
import uuid

import pytest
from prometheus_client import REGISTRY

from dataloader import JobContext, pipeline
from dataloader.storage.db import create_pool
from tests.conftest import wait_until
from tests.support.engine import enqueue, job_row, running_engine
from tests.support.wire import CountingProxy

# (job_id, attempt) -> (monotonic start, monotonic end or None, how it ended)
RUNS: dict[tuple[uuid.UUID, int], list] = {}
LEASE_SEC = 3


@pipeline("test.self_fence_hold")
async def hold(ctx: JobContext):
    """Attempt 1 holds its key until stopped; later attempts end at once."""
    run = RUNS.setdefault((ctx.job_id, ctx.attempt), [time.monotonic(), None, None])
    try:
        if ctx.attempt == 1:
            await asyncio.Event().wait()
    except BaseException as exc:
        run[1:] = [time.monotonic(), type(exc).__name__]
        raise
    run[1:] = [time.monotonic(), "completed"]


@pipeline("test.self_fence_hold_gen")
async def hold_in_a_generator(ctx: JobContext):
    """The same, as an async generator that waits (as on I/O riding out the outage) before its
    first yield: a stop at the next yield would come after the lease ran out."""
    run = RUNS.setdefault((ctx.job_id, ctx.attempt), [time.monotonic(), None, None])
    try:
        if ctx.attempt == 1:
            await asyncio.Event().wait()
        yield
    except BaseException as exc:
        run[1:] = [time.monotonic(), type(exc).__name__]
        raise
    run[1:] = [time.monotonic(), "completed"]


def _self_fenced(queue: str) -> float:
    return REGISTRY.get_sample_value("dl_attempts_self_fenced_total", {"queue": queue}) or 0.0


@pytest.mark.parametrize("task", ["test.self_fence_hold", "test.self_fence_hold_gen"],
                         ids=["coroutine", "async-generator"])
async def test_a_worker_cut_off_from_the_database_stops_its_attempt_before_the_lease_can_run_out(dsn, db, task):
    port = int(await db.fetchval("SHOW port"))
    fenced_before = _self_fenced("default")
    async with CountingProxy(dsn, port) as proxy:
        cut_off_pool = await create_pool(proxy.dsn, max_size=4)
        try:
            async with running_engine(proxy.dsn, cut_off_pool, run_reaper=False, heartbeat_sec=0.5):
                job_id = await enqueue(db, task, lock_key="self-fence", lease_ttl_sec=LEASE_SEC)
                await wait_until(lambda: (job_id, 1) in RUNS, message="attempt 1 never started")
                # let a heartbeat renew the lease once, so the guard's time comes from a heartbeat
                first_lease = (await job_row(db, job_id))["lease_expires_at"]
                await wait_until(lambda: _lease_moved(db, job_id, first_lease), timeout=5,
                                 message="no heartbeat renewed the lease")
                proxy.partition()
                await wait_until(lambda: RUNS[(job_id, 1)][1] is not None, timeout=LEASE_SEC * 2,
                                 message="the cut-off worker never stopped its attempt")
                # Read after the stop: a lease still valid now was valid when the attempt stopped.
                row = await db.fetchrow("SELECT status::text, attempt, lease_expires_at > now() AS leased "
                                        "FROM dl_jobs WHERE job_id = $1", job_id)
                assert (row["status"], row["attempt"], row["leased"]) == ("running", 1, True), dict(row)
                assert RUNS[(job_id, 1)][2] == "CancelledError"
                assert _self_fenced("default") == fenced_before + 1

                # The database the first worker was on is gone, and its sessions' advisory locks
                # with it (a promoted standby has none); its statements still hang. Another node's
                # reaper takes the job back once the lease ran out, and another worker runs
                # attempt 2 while the first one is still cut off.
                # (this database's sessions only: other tests share the server)
                await db.execute("SELECT pg_terminate_backend(l.pid) FROM pg_locks l JOIN pg_database d "
                                 "ON d.oid = l.database WHERE l.locktype = 'advisory' "
                                 "AND d.datname = current_database() AND l.pid <> pg_backend_pid()")
                async with running_engine(dsn, db, reaper_period_sec=0.2):
                    await wait_until(lambda: _status(db, job_id, "succeeded"), timeout=LEASE_SEC * 3,
                                     message="the job was not taken over")
                first, second = RUNS[(job_id, 1)], RUNS[(job_id, 2)]
                assert first[1] < second[0], "two holders of one lock_key overlapped"
                proxy.heal()  # the first worker's late release of attempt 1 is refused (fenced)
            # (leaving the block stopped the first worker, which wrote what it still had to write)
        finally:
            await cut_off_pool.close()
    row = await job_row(db, job_id)
    assert (row["status"], row["attempt"]) == ("succeeded", 2)
    kinds = [r["kind"] for r in await db.fetch(
        "SELECT kind FROM dl_job_events WHERE job_id = $1 AND kind <> 'heartbeat' ORDER BY event_id", job_id)]
    assert kinds == ["queued", "picked", "requeue", "picked", "done"]


async def _lease_moved(db, job_id, first) -> bool:
    return (await job_row(db, job_id))["lease_expires_at"] > first


async def _status(db, job_id, status: str) -> bool:
    return (await job_row(db, job_id))["status"] == status



@pipeline("test.self_fence_long")
async def long_run(ctx: JobContext):
    """Runs three leases long, in chunks (so a stop would be seen)."""
    for _ in range(int(ctx.args["chunks"])):
        await asyncio.sleep(0.1)
        yield


async def test_an_attempt_longer_than_its_lease_keeps_running_while_heartbeats_renew_it(dsn, db):
    """The guard's other half: every heartbeat moves the attempt's fence time, so a healthy worker
    never stops a job for running longer than one lease."""
    fenced_before = _self_fenced("default")
    async with running_engine(dsn, db, heartbeat_sec=0.3):
        job_id = await enqueue(db, "test.self_fence_long", args={"chunks": 10 * LEASE_SEC}, lease_ttl_sec=LEASE_SEC)
        await wait_until(lambda: _status(db, job_id, "succeeded"), timeout=LEASE_SEC * 6,
                         message="the long job did not succeed")
    row = await job_row(db, job_id)
    assert row["attempt"] == 1
    assert (row["finished_at"] - row["started_at"]).total_seconds() >= LEASE_SEC
    assert _self_fenced("default") == fenced_before


HELD_ONCE: set[uuid.UUID] = set()


@pipeline("test.self_fence_once")
async def hold_once(ctx: JobContext):
    """A job's first run holds until stopped; any later run (the attempt given back is attempt 1
    again) ends at once."""
    if ctx.job_id in HELD_ONCE:
        return
    HELD_ONCE.add(ctx.job_id)
    run = RUNS.setdefault((ctx.job_id, 0), [time.monotonic(), None, None])
    try:
        await asyncio.Event().wait()
    except BaseException as exc:
        run[1:] = [time.monotonic(), type(exc).__name__]
        raise


async def test_the_guard_counts_a_late_heartbeat_from_its_send_and_the_fenced_attempt_puts_its_job_back(dsn, db):
    """(1) A heartbeat's lease is counted by the database from its statement, which the worker sent
    before: the guard must count from the send, not from the reply. The proxy holds one heartbeat's
    reply longer than the margin (the heartbeat commits; its answer comes late), then cuts the link
    right after delivering it: the attempt must stop while its lease is still valid. Counted from
    the reply (`renewed(..., clock.monotonic())` in queue_worker.py), the fence falls after the
    lease's end and this fails. (2) Once the link is back, the self-fenced attempt's own release puts
    the job back (a 'requeue' with reason lease_lost, the attempt given back) before any reaper
    could: no reaper runs here, so a release that wrote nothing leaves the job running and this
    fails."""
    port = int(await db.fetchval("SHOW port"))
    lease = 3.0
    margin = min(lease / 5, 2.0)
    async with CountingProxy(dsn, port) as proxy:
        cut_off_pool = await create_pool(proxy.dsn, max_size=4)
        try:
            # one slot: with its job running the worker claims nothing, so each heartbeat is a
            # statement of its own (autocommit) that commits while its reply is held
            async with running_engine(proxy.dsn, cut_off_pool, {"default": 1}, run_reaper=False,
                                      heartbeat_sec=0.5):
                job_id = await enqueue(db, "test.self_fence_once", lease_ttl_sec=int(lease))
                await wait_until(lambda: (job_id, 0) in RUNS, message="the attempt never started")
                first = (await job_row(db, job_id))["lease_expires_at"]
                await wait_until(lambda: _lease_moved(db, job_id, first), timeout=5, message="no heartbeat")
                proxy.hold_replies()
                held_from = (await job_row(db, job_id))["lease_expires_at"]
                await wait_until(lambda: _lease_moved(db, job_id, held_from), timeout=5,
                                 message="no heartbeat committed while its reply was held")
                await asyncio.sleep(margin * 2)  # the reply comes later than the margin
                proxy.cut_then_deliver()
                await wait_until(lambda: RUNS[(job_id, 0)][1] is not None, timeout=lease * 2,
                                 message="the cut-off worker never stopped its attempt")
                row = await db.fetchrow("SELECT status::text, lease_expires_at > now() AS leased, "
                                        "extract(epoch FROM lease_expires_at - now()) AS left_sec "
                                        "FROM dl_jobs WHERE job_id = $1", job_id)
                assert (row["status"], row["leased"]) == ("running", True), \
                    f"the attempt stopped {-row['left_sec']:.2f} s after its lease ran out"
                proxy.heal()
                await wait_until(lambda: _status(db, job_id, "succeeded"), timeout=lease * 2,
                                 message="the self-fenced attempt's release did not put the job back")
        finally:
            await cut_off_pool.close()
    events = await db.fetch("SELECT kind, payload FROM dl_job_events WHERE job_id = $1 AND kind <> 'heartbeat' "
                            "ORDER BY event_id", job_id)
    assert [e["kind"] for e in events] == ["queued", "picked", "requeue", "picked", "done"]
    requeue = events[2]["payload"]
    requeue = requeue if isinstance(requeue, dict) else json.loads(requeue)
    assert requeue.get("reason") == "lease_lost", requeue
    assert (await job_row(db, job_id))["attempt"] == 1, "the released attempt was not given back"
