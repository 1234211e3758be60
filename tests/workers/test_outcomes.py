"""Pipeline outcomes besides raising (Snooze, Retry, Cancel; returned or raised), the job's
result, and ctx.transaction() in one engine process: each one's row, journal rows and result as
the README documents them. The fenced transaction is driven by hand: the lease is expired and the
real Reaper runs while the pipeline is inside its block."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from dataloader.jobs.manager import JobRequest
from dataloader.jobs.reaper import Reaper
from dataloader.storage.repositories import JobRepository
from tests.conftest import wait_until
from tests.support.engine import enqueue, job_row, job_service, running_engine
from tests.support.pipelines import TX_DDL, TX_ERRORS, TX_GATES


@pytest.fixture
async def business(db):
    await db.execute(TX_DDL)
    await db.execute("TRUNCATE test_business, test_marks RESTART IDENTITY")
    return db


async def _status_in(db, job_id, *statuses):
    row = await job_row(db, job_id)
    return row if row["status"] in statuses else None


async def _events(db, job_id):
    rows = await db.fetch("SELECT kind, payload FROM dl_job_events WHERE job_id = $1 AND kind <> 'heartbeat' "
                          "ORDER BY event_id", job_id)
    return [(r["kind"], r["payload"]) for r in rows]


@pytest.mark.parametrize("task", ["test.outcome", "test.outcome_sync"])
@pytest.mark.parametrize("value", [{"rows": 3, "names": ["a", "ü"]}, "done", 7, [1, None]])
async def test_a_returned_value_is_the_jobs_result(dsn, db, task, value):
    async with running_engine(dsn, db):
        job_id = await enqueue(db, task, args={"action": "value", "value": value})
        row = await wait_until(lambda: _status_in(db, job_id, "succeeded", "failed"), timeout=10)
    assert (row["status"], row["result"], row["error"]) == ("succeeded", value, None)
    job = await job_service(db).get(job_id)
    assert job.result == value
    kind, payload = (await _events(db, job_id))[-1]
    assert kind == "done" and payload == {"attempt": 1}


async def test_nothing_returned_stores_null(dsn, db):
    async with running_engine(dsn, db):
        job_id = await enqueue(db, "test.outcome", args={"action": "value", "value": None})
        row = await wait_until(lambda: _status_in(db, job_id, "succeeded"), timeout=10)
    assert await db.fetchval("SELECT result IS NULL FROM dl_jobs WHERE job_id = $1", job_id)
    assert row["result"] is None


async def test_an_unstorable_result_fails_its_attempt_not_the_batch(dsn, db):
    """20 jobs finish in the same batches; the one whose result jsonb would refuse fails alone."""
    async with running_engine(dsn, db, queues={"default": 20}):
        bad = await enqueue(db, "test.outcome", args={"action": "unstorable"}, max_attempts=1)
        good = [await enqueue(db, "test.outcome", args={"action": "value", "value": {"n": n}}) for n in range(19)]
        await wait_until(lambda: _status_in(db, bad, "failed", "queued"), timeout=10)
        for job_id in good:
            await wait_until(lambda job_id=job_id: _status_in(db, job_id, "succeeded"), timeout=10)
    row = await job_row(db, bad)
    assert row["result"] is None
    assert row["error"].startswith("ValueError: the pipeline's return value cannot be stored as the job's result")
    assert "NUL" in row["error"]
    assert [(await job_row(db, j))["result"] for j in good] == [{"n": n} for n in range(19)]


@pytest.mark.parametrize("how", ["return", "raise"])
@pytest.mark.parametrize("task", ["test.outcome", "test.outcome_sync"])
async def test_snooze_requeues_later_without_using_an_attempt(dsn, db, how, task):
    async with running_engine(dsn, db):
        job_id = await enqueue(db, task, args={"action": "snooze", "seconds": 3600, "how": how})
        await wait_until(lambda: db.fetchval("SELECT count(*) FROM dl_job_events WHERE job_id=$1 AND kind='requeue'",
                                             job_id), timeout=10)
    row = await db.fetchrow("SELECT status::text, attempt, started_at, error, "
                            "extract(epoch FROM available_at - now()) AS due_in FROM dl_jobs WHERE job_id=$1", job_id)
    assert (row["status"], row["attempt"], row["started_at"], row["error"]) == ("queued", 0, None, None)
    assert 3500 < row["due_in"] <= 3600
    kind, payload = (await _events(db, job_id))[-1]
    assert kind == "requeue" and payload["reason"] == "snooze" and payload["attempt"] == 1
    assert "available_at" in payload


async def test_a_snoozed_job_runs_again_and_the_snooze_did_not_count(dsn, db):
    async with running_engine(dsn, db):
        job_id = await enqueue(db, "test.snooze_once", args={"dsn": dsn, "seconds": 0.2}, max_attempts=1)
        row = await wait_until(lambda: _status_in(db, job_id, "succeeded", "failed"), timeout=15)
    # max_attempts=1 and two runs: the snooze used no attempt
    assert (row["status"], row["attempt"], row["result"]) == ("succeeded", 1, "woke")
    assert [k for k, _ in await _events(db, job_id)] == ["queued", "picked", "requeue", "picked", "done"]


@pytest.mark.parametrize("how", ["return", "raise"])
async def test_retry_uses_an_attempt_with_its_own_delay(dsn, db, how):
    async with running_engine(dsn, db):
        job_id = await enqueue(db, "test.outcome", args={"action": "retry", "seconds": 3600, "how": how,
                                                         "reason": "rate limited"})
        await wait_until(lambda: db.fetchval("SELECT count(*) FROM dl_job_events WHERE job_id=$1 AND kind='requeue'",
                                             job_id), timeout=10)
    row = await db.fetchrow("SELECT status::text, attempt, error, extract(epoch FROM available_at - now()) AS due_in "
                            "FROM dl_jobs WHERE job_id=$1", job_id)
    assert (row["status"], row["attempt"], row["error"]) == ("queued", 1, "Retry: rate limited")
    assert 3500 < row["due_in"] <= 3600
    kind, payload = (await _events(db, job_id))[-1]
    assert kind == "requeue" and payload["reason"] == "retry" and payload["error"] == "Retry: rate limited"


async def test_retry_on_the_last_attempt_fails_the_job(dsn, db):
    async with running_engine(dsn, db):
        # test.outcome allows 2 attempts; the retry asks for 0.1 s, so both run
        job_id = await enqueue(db, "test.outcome", args={"action": "retry", "seconds": 0.1})
        row = await wait_until(lambda: _status_in(db, job_id, "failed"), timeout=15)
    assert (row["attempt"], row["error"]) == (2, "Retry: retry requested in 0.1 s")
    kinds = [(k, p.get("reason")) for k, p in await _events(db, job_id)]
    assert kinds == [("queued", None), ("picked", None), ("requeue", "retry"), ("picked", None), ("failed", None)]


@pytest.mark.parametrize("how", ["return", "raise"])
@pytest.mark.parametrize("task", ["test.outcome", "test.outcome_sync"])
async def test_cancel_ends_the_job_canceled_with_its_reason(dsn, db, how, task):
    async with running_engine(dsn, db):
        job_id = await enqueue(db, task, args={"action": "cancel", "reason": "order withdrawn", "how": how})
        row = await wait_until(lambda: _status_in(db, job_id, "canceled", "failed", "succeeded"), timeout=10)
    assert (row["status"], row["error"], row["attempt"], row["result"]) == ("canceled", "order withdrawn", 1, None)
    kind, payload = (await _events(db, job_id))[-1]
    assert kind == "canceled" and payload == {"attempt": 1, "error": "order withdrawn"}


# -- ctx.transaction() --------------------------------------------------------------------------


async def test_the_transaction_commits_the_writes_and_the_finish_together(dsn, business):
    db = business
    async with running_engine(dsn, db):
        job_id = await enqueue(db, "test.tx_gated", lock_key="tx-key")
        follower = await enqueue(db, "dl.noop", lock_key="tx-key")
        row = await wait_until(lambda: _status_in(db, job_id, "succeeded", "failed"), timeout=10)
        # the lock_key was released after the commit: the next job of the key runs
        await wait_until(lambda: _status_in(db, follower, "succeeded"), timeout=10)
    assert (row["status"], row["attempt"], row["result"]) == ("succeeded", 1, None)
    assert await db.fetchval("SELECT count(*) FROM test_business WHERE job_id=$1", job_id) == 1
    kind, payload = (await _events(db, job_id))[-1]
    assert kind == "done" and payload == {"attempt": 1, "transaction": True}
    assert [k for k, _ in await _events(db, job_id)].count("done") == 1


async def test_an_error_inside_the_block_rolls_back_and_retries(dsn, business):
    db = business
    async with running_engine(dsn, db):
        job_id = await enqueue(db, "test.tx_then_fail_inside", max_attempts=1)
        row = await wait_until(lambda: _status_in(db, job_id, "failed", "succeeded"), timeout=10)
    assert (row["status"], row["error"]) == ("failed", "RuntimeError: inside the transaction")
    assert await db.fetchval("SELECT count(*) FROM test_business WHERE job_id=$1", job_id) == 0


async def test_raising_after_the_commit_leaves_the_job_succeeded(dsn, business):
    db = business
    async with running_engine(dsn, db):
        job_id = await enqueue(db, "test.tx_then_raise")
        await wait_until(lambda: _status_in(db, job_id, "succeeded", "failed"), timeout=10)
    # the engine stopped, so the attempt has ended: it wrote no finish of its own after the commit
    row = await job_row(db, job_id)
    assert (row["status"], row["attempt"], row["error"]) == ("succeeded", 1, None)
    assert [k for k, _ in await _events(db, job_id)] == ["queued", "picked", "done"]
    assert await db.fetchval("SELECT count(*) FROM test_business WHERE job_id=$1", job_id) == 1


async def test_a_fenced_attempt_cannot_commit_and_the_job_runs_again(dsn, business):
    db = business
    TX_ERRORS.clear()
    # Heartbeats far apart, so nothing renews the lease the test expires; the reaper is run by hand.
    # The job taken back may be claimed again while the fenced attempt still holds its lock_key:
    # it is then held back DL_CLAIM_BACKOFF_SEC, kept short here.
    async with running_engine(dsn, db, run_reaper=False, heartbeat_sec=30, claim_backoff_sec=0.2):
        job_id = uuid.uuid4()
        entered, gate = asyncio.Event(), asyncio.Event()
        TX_GATES[job_id] = (entered, gate)
        try:
            await job_service(db).trigger(JobRequest(queue="default", task="test.tx_gated", lock_key="fenced",
                                                     lease_ttl_sec=300), job_id=job_id)
            await asyncio.wait_for(entered.wait(), 10)  # attempt 1 wrote its row, inside the block
            await db.execute("UPDATE dl_jobs SET lease_expires_at = now() - interval '1 second' "
                             "WHERE job_id = $1", job_id)
            assert await Reaper(JobRepository(db), period=1).tick() == 1
            gate.set()  # let it try to commit
            row = await wait_until(lambda: _status_in(db, job_id, "succeeded", "failed"), timeout=15)
        finally:
            TX_GATES.pop(job_id, None)
    assert (row["status"], row["attempt"]) == ("succeeded", 2)
    # the fenced attempt's write was rolled back with its refused finish
    rows = await db.fetch("SELECT attempt FROM test_business WHERE job_id=$1", job_id)
    assert [r["attempt"] for r in rows] == [2]
    assert [type(e).__name__ for e in TX_ERRORS] == ["AttemptFenced"]
    assert TX_ERRORS[0].args == ("lease_lost",)
    events = await _events(db, job_id)
    assert ("requeue", {"attempt": 1, "reason": "lease_expired"}) in events
    assert [k for k, _ in events].count("done") == 1 and events[-1][0] == "done"
