"""Run-time limits (docs/patterns.md "Run-time limits"): a pipeline's `timeout` and a job's
`timeout_sec` stop the attempt past the limit, per pipeline kind, and the job retries or fails per
its policy with the journal saying why."""

from __future__ import annotations

from dataloader import metrics
from tests.conftest import wait_until
from tests.support.engine import enqueue, job_row, running_engine


async def _ended(db, job_id):
    row = await job_row(db, job_id)
    return row if row["status"] in ("succeeded", "failed", "canceled") else None


async def _events(db, job_id):
    rows = await db.fetch("SELECT kind, payload FROM dl_job_events WHERE job_id = $1 AND kind <> 'heartbeat' "
                          "ORDER BY event_id", job_id)
    return [(r["kind"], r["payload"]) for r in rows]


def _timeouts(task: str) -> float:
    return metrics.JOB_TIMEOUTS.labels("default", task)._value.get()


async def test_a_pipeline_timeout_cancels_a_coroutine_and_retries_per_policy(dsn, db):
    before = _timeouts("test.timeout_async")
    async with running_engine(dsn, db, timeout_grace_sec=0.2):
        job_id = await enqueue(db, "test.timeout_async")
        row = await wait_until(lambda: _ended(db, job_id), timeout=15)
    assert (row["status"], row["attempt"], row["error"]) == ("failed", 2, "run time limit of 0.5 s exceeded")
    events = [(k, p.get("reason"), p.get("error")) for k, p in await _events(db, job_id) if k != "picked"]
    assert events == [("queued", None, None), ("requeue", "timeout", "run time limit of 0.5 s exceeded"),
                      ("failed", "timeout", "run time limit of 0.5 s exceeded")]
    assert _timeouts("test.timeout_async") == before + 2


async def test_the_jobs_own_timeout_overrides_the_pipelines(dsn, db):
    async with running_engine(dsn, db, timeout_grace_sec=0.2):
        short = await enqueue(db, "test.async_sleep", args={"seconds": 30}, timeout_sec=1, max_attempts=1)
        # the pipeline's limit is 0.5 s; the job's 3 s lets a 1 s run succeed
        longer = await enqueue(db, "test.timeout_async", args={"seconds": 1}, timeout_sec=3)
        row = await wait_until(lambda: _ended(db, short), timeout=15)
        assert (row["status"], row["error"], row["timeout_sec"]) == ("failed", "run time limit of 1 s exceeded", 1)
        assert (await wait_until(lambda: _ended(db, longer), timeout=15))["status"] == "succeeded"


async def test_a_generator_stops_at_its_next_yield(dsn, db):
    async with running_engine(dsn, db, timeout_grace_sec=30):
        job_id = await enqueue(db, "test.timeout_chunks")
        # the grace is 30 s: ending within 10 means it stopped at a yield, not by the grace
        row = await wait_until(lambda: _ended(db, job_id), timeout=10)
    assert (row["status"], row["error"]) == ("failed", "run time limit of 0.5 s exceeded")
    assert (await _events(db, job_id))[-1] == ("failed", {"attempt": 1, "error": row["error"], "reason": "timeout"})


async def test_a_generator_that_does_not_yield_is_cancelled_after_the_grace(dsn, db):
    async with running_engine(dsn, db, timeout_grace_sec=0.3):
        job_id = await enqueue(db, "test.timeout_chunk_stuck")
        row = await wait_until(lambda: _ended(db, job_id), timeout=10)
    assert (row["status"], row["error"]) == ("failed", "run time limit of 0.5 s exceeded")


async def _lock_held(db, key: str) -> bool:
    return await db.fetchval("SELECT count(*) > 0 FROM pg_locks WHERE locktype = 'advisory' AND granted "
                             "AND objid::bigint = (hashtext($1)::bigint & 4294967295)", key)


async def test_a_sync_function_past_its_limit_ends_the_attempt_but_keeps_its_lock_key_until_the_thread_ends(dsn, db):
    """A thread cannot be killed: the attempt fails at the limit, and the lock_key stays held (the
    key's next job waits) until the thread really ends; then the next job runs at once."""
    import asyncio
    import threading

    from tests.support.pipelines import THREAD_GATES

    gate = THREAD_GATES.setdefault("stuck-1", threading.Event())
    gate.clear()
    try:
        async with running_engine(dsn, db, timeout_grace_sec=0.2):
            stuck = await enqueue(db, "test.timeout_sync_gated", lock_key="K", args={"gate": "stuck-1"})
            row = await wait_until(lambda: _ended(db, stuck), timeout=10)
            assert (row["status"], row["error"]) == ("failed", "run time limit of 0.5 s exceeded")
            assert gate.is_set() is False  # the thread still runs
            waiting = await enqueue(db, "dl.noop", lock_key="K")
            for _ in range(10):  # sampled over about a second: the key stays taken while the thread runs
                assert await _lock_held(db, "K")
                assert (await job_row(db, waiting))["status"] in ("queued", "running")
                assert (await job_row(db, waiting))["status"] != "succeeded"
                await asyncio.sleep(0.1)
            gate.set()
            # woken by the release (DL_CLAIM_BACKOFF_SEC is 15 s: ending within 5 s shows it)
            done = await wait_until(lambda: _ended(db, waiting), timeout=5)
            assert done["status"] == "succeeded"
            await wait_until(lambda: _not(_lock_held(db, "K")), timeout=10)
    finally:
        gate.set()


async def _not(awaitable) -> bool:
    return not await awaitable
