"""Fencing (DESIGN promise 3): once the reaper took a job back, the old attempt's heartbeat, progress
and finish are refused, and a worker that learns it was fenced off stops its pipeline.

Every test here fences a REAL attempt: the job is claimed by the claim statement, taken back by the
real `Reaper` (its lease made to look expired, as time would), and where it matters claimed again,
which gives the next attempt its own number."""

import asyncio
import uuid
from contextlib import asynccontextmanager

from prometheus_client import REGISTRY

from dataloader import JobContext, pipeline
from dataloader.jobs.reaper import Reaper
from dataloader.storage.queue_connection import FinishRequest, QueueConnection
from dataloader.storage.repositories import JobRepository
from tests.conftest import wait_until
from tests.support.engine import enqueue, event_kinds, job_row, running_engine
from tests.support.pipelines import _record_end, _record_start

GATES: dict[str, asyncio.Event] = {}
OUTCOMES: dict[tuple[uuid.UUID, int], str] = {}


@pipeline("test.fence_probe")
async def fence_probe(ctx: JobContext):
    """In-process probe. Attempt 1 runs `chunks` chunks of `chunk_sec` (writing progress before each
    when `progress` is set), then waits for GATES[`gate`] if given; later attempts run one chunk.
    test_runs gets its ended_at only when the pipeline ran to the end; OUTCOMES says how it ended."""
    run_id = await _record_start(ctx)
    key = (ctx.job_id, ctx.attempt)
    try:
        chunks = int(ctx.args.get("chunks", 1)) if ctx.attempt == 1 else 1
        for i in range(chunks):
            if ctx.args.get("progress"):
                await ctx.progress({"chunk": i, "attempt": ctx.attempt})
            await asyncio.sleep(float(ctx.args.get("chunk_sec", 0.05)))
            yield
        if ctx.args.get("gate"):
            await GATES[ctx.args["gate"]].wait()
    except BaseException as exc:
        OUTCOMES[key] = f"stopped: {type(exc).__name__}({exc})"
        raise
    OUTCOMES[key] = "completed"
    await _record_end(ctx, run_id)


async def _expire(db, job_id):
    await db.execute("UPDATE dl_jobs SET lease_expires_at = now() - interval '1 second' WHERE job_id=$1", job_id)


async def _reap(db, job_id) -> int:
    """Let the lease run out and the real reaper take the job back. A heartbeat landing between the
    two statements renews the lease: then try again (wait_until), never assume."""
    await _expire(db, job_id)
    return await Reaper(JobRepository(db), period=1).tick()


def _fenced_count(queue: str) -> float:
    return REGISTRY.get_sample_value("dl_jobs_finished_total",
                                     {"queue": queue, "task": "test.fence_probe", "outcome": "fenced"}) or 0.0


async def _events(db, job_id):
    return await db.fetch("SELECT event_id, kind, payload FROM dl_job_events WHERE job_id=$1 ORDER BY event_id",
                          job_id)


async def test_reaper_returns_an_expired_lease_to_the_queue(db):
    job_id = await enqueue(db)
    conn = await db.acquire()
    try:
        job = await QueueConnection(conn).claim_one("default", "crashed-worker")
        await _expire(db, job_id)
        reaped = await Reaper(JobRepository(db), period=1).tick()
        assert reaped == 1
        row = await job_row(db, job_id)
        assert (row["status"], row["attempt"], row["lease_expires_at"]) == ("queued", 1, None)
        assert "lease expired" in row["error"]
        assert await event_kinds(db, job_id) == ["queued", "picked", "requeue"]
        # the crashed worker's late writes are refused (fenced) and change nothing
        assert await QueueConnection(conn).heartbeat([(job_id, job.attempt)]) == {}
        assert await JobRepository(db).set_progress(job_id, job.attempt, {"x": 1}) is None
        result = await QueueConnection(conn).finish_one(FinishRequest(
            job_id, job.attempt, "succeeded", lock_key=job.lock_key, unlock=True))
        assert result.status is None
        row = await job_row(db, job_id)
        assert row["status"] == "queued" and row["progress"] == {}
        assert await event_kinds(db, job_id) == ["queued", "picked", "requeue"]
    finally:
        await db.release(conn)


async def test_every_write_of_an_old_attempt_is_refused_while_the_next_attempt_runs(db):
    """The dangerous case: the job is `running` again (attempt 2, another node), so only the attempt
    number tells the stale worker's writes apart."""
    job_id = await enqueue(db)
    old = await db.acquire()
    new = await db.acquire()
    try:
        stale = await QueueConnection(old).claim_one("default", "old")
        assert stale.attempt == 1
        await old.execute("SELECT pg_advisory_unlock(hashtext($1))", stale.lock_key)  # it froze
        assert await _reap(db, job_id) == 1
        fresh = await QueueConnection(new).claim_one("default", "new")
        assert fresh.job_id == job_id and fresh.attempt == 2 and fresh.locked
        before = await job_row(db, job_id)
        events_before = await event_kinds(db, job_id)

        assert await QueueConnection(old).heartbeat([(job_id, stale.attempt)]) == {}
        assert await JobRepository(db).set_progress(job_id, stale.attempt, {"stale": True}) is None
        for outcome in ("succeeded", "error", "canceled", "release"):
            refused = await QueueConnection(old).finish_one(FinishRequest(
                job_id, stale.attempt, outcome, error="late", lock_key=stale.lock_key, unlock=False))
            assert refused.status is None, outcome

        after = await job_row(db, job_id)
        assert (after["status"], after["attempt"]) == ("running", 2)
        assert (after["progress"], after["error"]) == (before["progress"], before["error"])
        assert (after["lease_expires_at"], after["heartbeat_at"]) == (before["lease_expires_at"],
                                                                      before["heartbeat_at"])
        assert await event_kinds(db, job_id) == events_before
        # the current attempt's writes still apply
        assert await QueueConnection(new).heartbeat([(job_id, fresh.attempt)]) == {job_id: False}
        assert await JobRepository(db).set_progress(job_id, fresh.attempt, {"fresh": True}) is False
        done = await QueueConnection(new).finish_one(FinishRequest(
            job_id, fresh.attempt, "succeeded", lock_key=fresh.lock_key, unlock=True))
        assert done.status == "succeeded"
        assert (await job_row(db, job_id))["progress"] == {"fresh": True}
    finally:
        await db.release(old)
        await db.release(new)


async def test_reaper_marks_lost_when_no_attempt_is_left(db):
    job_id = await enqueue(db, max_attempts=1)
    conn = await db.acquire()
    try:
        await QueueConnection(conn).claim_one("default", "crashed-worker")
        await _expire(db, job_id)
        await Reaper(JobRepository(db), period=1).tick()
    finally:
        await db.release(conn)
    row = await job_row(db, job_id)
    assert row["status"] == "lost" and row["finished_at"] is not None
    assert (await event_kinds(db, job_id))[-1] == "lost"


async def test_concurrent_reapers_take_each_job_back_once(db):
    ids = [await enqueue(db) for _ in range(300)]
    await db.execute("UPDATE dl_jobs SET status='running', attempt=1, lease_expires_at=now() - interval '1 s'")
    reapers = [Reaper(JobRepository(db), period=1, batch_size=50) for _ in range(4)]
    counts = await asyncio.gather(*(r.tick() for r in reapers))
    assert sum(counts) == len(ids)
    per_job = await db.fetch("SELECT job_id, count(*) AS n FROM dl_job_events WHERE kind='requeue' GROUP BY job_id")
    assert len(per_job) == len(ids) and {r["n"] for r in per_job} == {1}


async def _running_attempt(db, job_id, attempt: int = 1, with_progress: bool = False):
    row = await job_row(db, job_id)
    return (row["status"] == "running" and row["attempt"] == attempt
            and (not with_progress or "chunk" in row["progress"]))


async def _stale_run(db, job_id):
    return await db.fetchrow("SELECT * FROM test_runs WHERE job_id=$1 AND attempt=1", job_id)


@asynccontextmanager
async def _engine(dsn, db, **kwargs):
    """running_engine, then: the engine must not leave a lock_key locked behind it. A control
    connection still holding a key at stop is quarantined (never released, so the key stays taken
    until the process exits); it is closed here so that one failing test does not hang the run."""
    async with running_engine(dsn, db, **kwargs) as manager:
        yield manager
    stray = list(manager.env.quarantine)
    for conn in stray:
        conn.terminate()
        await db.release(conn)
    manager.env.quarantine.clear()
    assert not stray, ("the engine stopped still holding lock_keys "
                       f"{[w.held_locks for w in manager.workers.values()]}: an attempt's lock was never released")


async def _assert_stale_attempt_fenced(db, job_id, queue, fenced_before):
    """Attempt 1 wrote nothing after the reaper took the job back; attempt 2 ran and finished."""
    row = await job_row(db, job_id)
    assert (row["status"], row["attempt"]) == ("succeeded", 2)
    events = await _events(db, job_id)
    reaped_at = next(e["event_id"] for e in events if e["kind"] == "requeue")
    late = [(e["kind"], e["payload"]) for e in events
            if e["event_id"] > reaped_at and e["payload"].get("attempt") == 1]
    assert late == [], f"writes of the fenced-off attempt 1 were applied: {late}"
    requeues = [e["payload"] for e in events if e["kind"] == "requeue"]
    assert requeues == [{"attempt": 1, "reason": "lease_expired"}], requeues
    assert [e["payload"]["attempt"] for e in events if e["kind"] == "done"] == [2]
    # the stale attempt's finish was sent and refused (counted as fenced), not skipped
    assert _fenced_count(queue) == fenced_before + 1


async def test_fenced_worker_is_refused_at_its_next_progress_and_stops_its_pipeline(dsn, db):
    # heartbeat every 20 s (a third of the 60 s lease): only the progress write can tell the worker
    queue = "fence-progress"
    fenced_before = _fenced_count(queue)
    async with _engine(dsn, db, queues={queue: 1}, heartbeat_sec=30, run_reaper=False):
        job_id = await enqueue(db, "test.fence_probe", queue=queue,
                               args={"dsn": dsn, "chunks": 400, "chunk_sec": 0.05, "progress": True})
        await wait_until(lambda: _running_attempt(db, job_id, with_progress=True), timeout=10)
        assert await _reap(db, job_id) == 1  # no heartbeat can land in between: the first is 20 s away
        await wait_until(lambda: OUTCOMES.get((job_id, 1)), timeout=10,
                         message="the fenced-off pipeline to stop (before its next heartbeat)")
        await wait_until(lambda: _status_is(db, job_id, "succeeded"), timeout=10)
    assert OUTCOMES[(job_id, 1)] == "stopped: JobStopped(lease_lost)", "not stopped by its refused progress"
    stale = await _stale_run(db, job_id)
    # 400 x 50 ms = 20 s: had it not been stopped it would still be running, or have recorded its end
    assert stale["ended_at"] is None, "the fenced-off pipeline ran to the end"
    assert (await job_row(db, job_id))["progress"] == {"chunk": 0, "attempt": 2}
    await _assert_stale_attempt_fenced(db, job_id, queue, fenced_before)


async def test_fenced_worker_is_refused_at_its_next_heartbeat_and_stops_its_pipeline(dsn, db):
    # no progress writes: only the heartbeat (every 0.2 s) can tell the worker
    queue = "fence-heartbeat"
    fenced_before = _fenced_count(queue)
    async with _engine(dsn, db, queues={queue: 1}, heartbeat_sec=0.2, run_reaper=False):
        job_id = await enqueue(db, "test.fence_probe", queue=queue,
                               args={"dsn": dsn, "chunks": 400, "chunk_sec": 0.05})
        await wait_until(lambda: _running_attempt(db, job_id), timeout=10)
        await wait_until(lambda: db.fetchval("SELECT count(*) FROM test_runs WHERE job_id=$1", job_id))
        await wait_until(lambda: _reap(db, job_id), timeout=10, message="the reaper to take the job back")
        await wait_until(lambda: OUTCOMES.get((job_id, 1)), timeout=10,
                         message="the fenced-off pipeline to stop")
        await wait_until(lambda: _status_is(db, job_id, "succeeded"), timeout=10)
    # stopped by the worker where it awaited (a lost lease interrupts a generator at once, it does
    # not wait for its next yield), not by a progress write
    assert OUTCOMES[(job_id, 1)] == "stopped: CancelledError()"
    assert (await _stale_run(db, job_id))["ended_at"] is None, "the fenced-off pipeline ran to the end"
    await _assert_stale_attempt_fenced(db, job_id, queue, fenced_before)


async def test_fenced_worker_whose_pipeline_completes_has_its_success_refused(dsn, db):
    # the pipeline completes after the reaper took the job back, before any heartbeat (20 s away)
    queue = "fence-finish"
    gate = GATES.setdefault(queue, asyncio.Event())
    fenced_before = _fenced_count(queue)
    async with _engine(dsn, db, queues={queue: 1}, heartbeat_sec=30, run_reaper=False):
        job_id = await enqueue(db, "test.fence_probe", queue=queue,
                               args={"dsn": dsn, "chunks": 1, "chunk_sec": 0, "gate": queue})
        await wait_until(lambda: _running_attempt(db, job_id), timeout=10)
        await wait_until(lambda: db.fetchval("SELECT count(*) FROM test_runs WHERE job_id=$1", job_id))
        assert await _reap(db, job_id) == 1
        gate.set()
        await wait_until(lambda: _status_is(db, job_id, "succeeded"), timeout=10)
    assert OUTCOMES[(job_id, 1)] == "completed"
    await _assert_stale_attempt_fenced(db, job_id, queue, fenced_before)


async def _status_is(db, job_id, status):
    return (await job_row(db, job_id))["status"] == status


async def _run_count(db):
    return await db.fetchval("SELECT count(*) FROM test_runs")


async def test_reaper_cancels_an_expired_job_whose_cancel_was_requested(db):
    job_id = await enqueue(db)
    conn = await db.acquire()
    try:
        await QueueConnection(conn).claim_one("default", "crashed-worker")
        await db.execute("UPDATE dl_jobs SET cancel_requested = true WHERE job_id=$1", job_id)
        await _expire(db, job_id)
        await Reaper(JobRepository(db), period=1).tick()
    finally:
        await conn.execute("SELECT pg_advisory_unlock_all()")
        await db.release(conn)
    row = await job_row(db, job_id)
    assert row["status"] == "canceled" and row["finished_at"] is not None
    assert (await event_kinds(db, job_id))[-1] == "canceled"


async def test_a_fenced_off_attempt_still_running_keeps_its_key_from_the_next_attempt(dsn, db):
    """The real reaper (of another node: this engine runs none) took the job back while this node's
    pipeline is still inside a long chunk. The same worker claims the job again at once; its session
    already holds the key, so it must notice the re-entrant lock and back off instead of running the
    job twice at once."""
    async with _engine(dsn, db, heartbeat_sec=0.1, run_reaper=False, claim_backoff_sec=0.3):
        job_id = await enqueue(db, "test.recorded_chunks", args={"dsn": dsn, "chunks": 1, "chunk_sec": 1.5})
        await wait_until(lambda: _run_count(db), timeout=10)
        await wait_until(lambda: _reap(db, job_id), timeout=10, message="the reaper to take the job back")
        await wait_until(lambda: db.fetchval("SELECT count(*) = 2 AND bool_and(ended_at IS NOT NULL) "
                                             "FROM test_runs"), timeout=15)
    runs = await db.fetch("SELECT attempt, started_at, ended_at FROM test_runs ORDER BY started_at")
    assert [r["attempt"] for r in runs] == [1, 2]
    assert runs[1]["started_at"] >= runs[0]["ended_at"], "the next attempt overlapped the fenced-off one"
    busy = await db.fetchval("SELECT count(*) FROM dl_job_events WHERE job_id=$1 AND kind='requeue' "
                             "AND payload->>'reason' = 'lock_busy'", job_id)
    assert busy >= 1
