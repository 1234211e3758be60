import asyncio
import uuid

from dataloader.jobs.manager import JobRequest
from tests.conftest import wait_until
from tests.support.engine import enqueue, event_kinds, job_row, job_service, running_engine


async def _ended(db, job_id):
    row = await job_row(db, job_id)
    return row if row["status"] in ("succeeded", "failed", "canceled", "lost") else None


async def _events(db, job_id):
    return await db.fetch("SELECT kind, payload FROM dl_job_events WHERE job_id=$1 ORDER BY event_id", job_id)


async def test_success_path_with_heartbeat_progress_and_journal(dsn, db):
    async with running_engine(dsn, db, heartbeat_sec=0.1):
        job_id = await enqueue(db, "dl.sleep", args={"seconds": 0.6, "chunks": 3})
        row = await wait_until(lambda: _ended(db, job_id), timeout=10)
    assert row["status"] == "succeeded"
    assert row["attempt"] == 1 and row["finished_at"] is not None and row["lease_expires_at"] is None
    assert row["progress"] == {"chunks_done": 3, "chunks_total": 3}
    kinds = await event_kinds(db, job_id)
    assert kinds[:2] == ["queued", "picked"] and kinds[-1] == "done"
    assert "heartbeat" in kinds


async def test_retry_then_failed_after_max_attempts(dsn, db):
    # test.flaky overrides max_attempts to 3 and the backoff to 0.2 s
    async with running_engine(dsn, db):
        job_id = await enqueue(db, "test.flaky", args={"succeed_on": 99})
        row = await wait_until(lambda: _ended(db, job_id), timeout=15)
    assert row["status"] == "failed" and row["attempt"] == 3
    assert "flaky failure on attempt 3" in row["error"]
    # a heartbeat row comes in when an attempt outlives the heartbeat period (a loaded machine):
    # liveness, not part of the life this test reads
    events = [e for e in await _events(db, job_id) if e["kind"] != "heartbeat"]
    assert [e["kind"] for e in events] == ["queued", "picked", "requeue", "picked", "requeue", "picked", "failed"]
    assert events[2]["payload"]["reason"] == "retry"


async def test_retry_then_success(dsn, db):
    async with running_engine(dsn, db):
        job_id = await enqueue(db, "test.flaky", args={"succeed_on": 2})
        row = await wait_until(lambda: _ended(db, job_id), timeout=15)
    assert (row["status"], row["attempt"], row["error"]) == ("succeeded", 2, None)


async def test_default_backoff_is_30s_times_attempt(dsn, db):
    async with running_engine(dsn, db):
        job_id = await enqueue(db, "dl.fail", args={"message": "boom"})
        await wait_until(lambda: _has_requeue(db, job_id), timeout=10)
    row = await job_row(db, job_id)
    assert row["status"] == "queued" and row["attempt"] == 1 and row["error"] == "RuntimeError: boom"
    delay = await db.fetchval("SELECT extract(epoch FROM available_at - ts) FROM dl_job_events e "
                              "JOIN dl_jobs j USING (job_id) WHERE job_id=$1 AND kind='requeue'", job_id)
    assert 29 < float(delay) <= 30.5


async def _has_requeue(db, job_id):
    return "requeue" in await event_kinds(db, job_id)


async def test_fatal_error_fails_at_once(dsn, db):
    async with running_engine(dsn, db):
        job_id = await enqueue(db, "dl.fail", args={"fatal": True, "message": "bad input"})
        row = await wait_until(lambda: _ended(db, job_id), timeout=10)
    assert (row["status"], row["attempt"]) == ("failed", 1)
    assert row["error"] == "FatalError: bad input"
    events = await _events(db, job_id)
    assert events[-1]["kind"] == "failed" and events[-1]["payload"]["fatal"] is True


async def test_cancel_queued_job_cancels_at_once_and_it_never_runs(dsn, db):
    job_id = await enqueue(db, "dl.noop")
    job = await job_service(db).cancel(job_id)
    assert job.status == "canceled" and job.finished_at is not None
    async with running_engine(dsn, db):
        await asyncio.sleep(0)  # the engine wakes all queues on start; nothing may be claimed
        other = await enqueue(db, "dl.noop")
        await wait_until(lambda: _ended(db, other), timeout=10)
    assert (await job_row(db, job_id))["attempt"] == 0
    assert await event_kinds(db, job_id) == ["queued", "canceled"]


async def test_cancel_running_generator_stops_at_next_chunk(dsn, db):
    # heartbeat every 20 s (60 s requested, capped at a third of the 60 s lease): only the NOTIFY can
    # explain a stop within 10 s
    async with running_engine(dsn, db, heartbeat_sec=60):
        job_id = await enqueue(db, "dl.sleep", args={"seconds": 60, "chunks": 600})
        await wait_until(lambda: _progressed(db, job_id), timeout=10)
        loop = asyncio.get_running_loop()
        asked = loop.time()
        job = await job_service(db).cancel(job_id)
        assert job.status == "running"
        row = await wait_until(lambda: _ended(db, job_id), timeout=15)
        took = loop.time() - asked
    assert row["status"] == "canceled" and row["error"] == "canceled by request"
    assert took < 10, f"canceled after {took:.1f}s: not through the NOTIFY"
    kinds = await event_kinds(db, job_id)
    assert kinds[-2:] == ["cancel_requested", "canceled"]


async def _progressed(db, job_id):
    return (await job_row(db, job_id))["progress"].get("chunks_done", 0) >= 1


async def test_cancel_running_plain_coroutine_interrupts_it(dsn, db):
    async with running_engine(dsn, db):
        job_id = await enqueue(db, "test.async_sleep", args={"seconds": 30})
        await wait_until(lambda: _status(db, job_id, "running"))
        await job_service(db).cancel(job_id)
        row = await wait_until(lambda: _ended(db, job_id), timeout=5)
    assert row["status"] == "canceled"


async def _status(db, job_id, status):
    return (await job_row(db, job_id))["status"] == status


async def test_sync_pipelines_run_in_threads(dsn, db):
    async with running_engine(dsn, db):
        plain = await enqueue(db, "test.sync_sleep", args={"seconds": 0.2})
        chunks = await enqueue(db, "test.sync_chunks", args={"chunks": 3})
        row_plain = await wait_until(lambda: _ended(db, plain), timeout=10)
        row_chunks = await wait_until(lambda: _ended(db, chunks), timeout=10)
    assert row_plain["status"] == "succeeded" and row_plain["progress"] == {"done": True}
    assert row_chunks["status"] == "succeeded" and row_chunks["progress"] == {"chunk": 3}


async def test_unknown_task_in_the_table_fails_with_a_clear_error(dsn, db):
    job_id = uuid.uuid4()
    await db.execute("INSERT INTO dl_jobs (job_id, queue, task, lock_key) VALUES ($1, 'default', 'nope', 'k')",
                     job_id)
    async with running_engine(dsn, db):
        row = await wait_until(lambda: _ended(db, job_id), timeout=10)
    assert row["status"] == "failed" and "no pipeline registered for task 'nope'" in row["error"]


async def test_idempotent_enqueue_returns_the_same_job(db):
    service = job_service(db)
    req = JobRequest(queue="default", task="dl.noop", lock_key="k", idempotency_key="once")
    first = await service.trigger(req)
    again = await service.trigger(req)
    assert first.created and not again.created
    assert first.job.id == again.job.id
    assert await db.fetchval("SELECT count(*) FROM dl_jobs") == 1
    assert await db.fetchval("SELECT count(*) FROM dl_job_events") == 1


async def test_concurrent_idempotent_enqueues_make_one_job(db):
    service = job_service(db)
    req = JobRequest(queue="default", task="dl.noop", lock_key="k", idempotency_key="race")
    results = await asyncio.gather(*(service.trigger(req) for _ in range(10)))
    assert len({r.job.id for r in results}) == 1
    assert sum(r.created for r in results) == 1


async def test_a_job_failing_after_cancel_was_requested_is_canceled_not_retried(dsn, db):
    async with running_engine(dsn, db, heartbeat_sec=0.1):
        job_id = await enqueue(db, "test.sync_fail_slow", args={"seconds": 0.5})
        await wait_until(lambda: _status(db, job_id, "running"))
        # the sync pipeline ignores the stop flag and then fails: its error must not turn into a retry
        await db.execute("UPDATE dl_jobs SET cancel_requested = true WHERE job_id=$1", job_id)
        row = await wait_until(lambda: _ended(db, job_id), timeout=10)
    assert (row["status"], row["attempt"]) == ("canceled", 1)


async def test_replaying_a_trigger_after_the_job_ran_returns_the_same_job(dsn, db):
    import datetime as dt

    service = job_service(db)
    req = JobRequest(queue="default", task="dl.fail", lock_key="k", idempotency_key="replay",
                     args={"message": "x"}, available_at=dt.datetime(2020, 1, 1, tzinfo=dt.UTC))
    first = await service.trigger(req)
    async with running_engine(dsn, db):
        await wait_until(lambda: _has_requeue(db, first.job.id), timeout=10)  # it ran and moved
    again = await service.trigger(req)
    assert not again.created and again.job.id == first.job.id


async def test_batch_enqueue_inserts_in_order_with_journal_and_skips_known_keys(db):
    service = job_service(db)
    await service.trigger(JobRequest(queue="default", task="dl.noop", lock_key="k0", idempotency_key="dup"))
    reqs = [JobRequest(queue="default", task="dl.noop", lock_key=f"k{i}",
                       idempotency_key="dup" if i == 3 else None, priority=i) for i in range(1, 6)]
    ids = await service.trigger_many(reqs)
    assert len(ids) == 4  # the one with a known idempotency_key is skipped
    rows = {r["job_id"]: r for r in await db.fetch("SELECT * FROM dl_jobs WHERE job_id = ANY($1)", ids)}
    assert [rows[i]["priority"] for i in ids] == [1, 2, 4, 5]  # input order
    assert await db.fetchval("SELECT count(*) FROM dl_job_events WHERE kind='queued' AND job_id = ANY($1)",
                             ids) == 4
