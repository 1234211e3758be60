"""The worker step in one statement (step_succeeded_claim.sql, issue #25): the finish of plain
successes and the plain claim, one autocommit statement, keeping the promises the two statements
kept: fencing, the journal rows with their state changes, the lock_key released and handed over,
a paused queue or task and a limited or fair queue claiming nothing. Driven on a real control
connection, as the queue worker drives it."""

from __future__ import annotations

import uuid

import asyncpg
import pytest

from dataloader.storage.queue_connection import ClaimedJob, FinishRequest, QueueConnection
from tests.support.engine import enqueue, event_kinds, job_row


@pytest.fixture
async def control(dsn):
    """A control connection of its own: its session locks end with it."""
    conn = await asyncpg.connect(dsn)
    try:
        yield conn
    finally:
        await conn.close()


def _queue() -> str:
    return f"step-{uuid.uuid4().hex[:8]}"


def _success(job: ClaimedJob, unlock: bool = True) -> FinishRequest:
    return FinishRequest(job_id=job.job_id, attempt=job.attempt, outcome="succeeded", lock_key=job.lock_key,
                         unlock=unlock, result_json='{"ok": true}')


async def _times_held(conn: asyncpg.Connection, lock_key: str) -> int:
    """How many times this session holds the key's advisory lock (releases them all to count)."""
    held = 0
    while await conn.fetchval("SELECT pg_advisory_unlock(hashtext($1))", lock_key):
        held += 1
    return held


async def test_one_statement_finishes_and_claims_with_their_journal_rows(db, control):
    queue = _queue()
    jobs = [await enqueue(db, queue=queue) for _ in range(3)]
    step = QueueConnection(control)
    first = (await step.claim(queue, "w", 2)).claimed
    assert [j.job_id for j in first] == jobs[:2]

    results, batch = await step.finish_succeeded_and_claim([_success(j) for j in first], queue, "w", 4)

    assert {job_id: r.status for job_id, r in results.items()} == {jobs[0]: "succeeded", jobs[1]: "succeeded"}
    assert [j.job_id for j in batch.claimed] == [jobs[2]] and batch.skipped == []
    claimed = batch.claimed[0]
    assert (claimed.attempt, claimed.queue, claimed.task) == (1, queue, "dl.noop")
    for job_id in jobs[:2]:
        row = await job_row(db, job_id)
        assert (row["status"], row["result"], row["lease_expires_at"]) == ("succeeded", {"ok": True}, None)
        assert await event_kinds(db, job_id) == ["queued", "picked", "done"]
    assert (await job_row(db, jobs[2]))["status"] == "running"
    assert await event_kinds(db, jobs[2]) == ["queued", "picked"]
    # the finished jobs' keys are free, the claimed one's is held once, by this session
    assert [await _times_held(control, j.lock_key) for j in first] == [0, 0]
    assert await _times_held(control, claimed.lock_key) == 1
    # autocommit: nothing waits for a COMMIT
    assert not control.is_in_transaction()


async def test_a_fenced_off_finish_writes_nothing_and_its_job_is_claimed_again_once(db, control):
    """The reaper took the job back (queued again, same attempt): the stale finish is refused in
    the statement, and the claim of the same statement takes the job again (attempt 2); the key,
    which this session held for the stale attempt, ends up held once, for the new one."""
    queue = _queue()
    job_id = await enqueue(db, queue=queue)
    step = QueueConnection(control)
    (stale,) = (await step.claim(queue, "w", 1)).claimed
    await db.execute("UPDATE dl_jobs SET status = 'queued', lease_expires_at = NULL WHERE job_id = $1", job_id)

    results, batch = await step.finish_succeeded_and_claim([_success(stale)], queue, "w", 4)

    assert results[job_id].status is None
    assert [(j.job_id, j.attempt) for j in batch.claimed] == [(job_id, 2)]
    row = await job_row(db, job_id)
    assert (row["status"], row["attempt"], row["result"]) == ("running", 2, None)
    assert await event_kinds(db, job_id) == ["queued", "picked", "picked"]  # no 'done'
    assert await _times_held(control, stale.lock_key) == 1


async def test_a_finish_with_another_attempt_number_is_refused(db, control):
    queue = _queue()
    job_id = await enqueue(db, queue=queue)
    step = QueueConnection(control)
    (job,) = (await step.claim(queue, "w", 1)).claimed
    await db.execute("UPDATE dl_jobs SET attempt = attempt + 1 WHERE job_id = $1", job_id)  # another holder's attempt

    results, batch = await step.finish_succeeded_and_claim([_success(job)], queue, "w", 4)

    assert results[job_id].status is None and batch.claimed == []
    assert (await job_row(db, job_id))["status"] == "running"
    assert await event_kinds(db, job_id) == ["queued", "picked"]


async def test_the_next_job_of_a_finishing_key_is_claimed_in_the_same_statement(db, control):
    """One snapshot for both halves: the finishing row still reads 'running', so the claim's
    running-key check leaves out the rows this statement ends, and the key is handed over at once
    (as the two-statement step did), held once by this session for the next job."""
    queue = _queue()
    first_id = await enqueue(db, queue=queue, lock_key="k")
    second_id = await enqueue(db, queue=queue, lock_key="k")
    step = QueueConnection(control)
    batch = await step.claim(queue, "w", 4)
    assert [j.job_id for j in batch.claimed] == [first_id] and [s.job_id for s in batch.skipped] == [second_id]

    results, batch = await step.finish_succeeded_and_claim([_success(batch.claimed[0])], queue, "w", 4)

    assert results[first_id].status == "succeeded"
    assert [j.job_id for j in batch.claimed] == [second_id]
    assert await _times_held(control, "k") == 1


async def test_a_running_job_of_the_key_that_is_not_finishing_still_blocks_its_key(db, control):
    queue = _queue()
    other_id = await enqueue(db, queue=queue, lock_key="a")
    held_id = await enqueue(db, queue=queue, lock_key="k")
    waiting_id = await enqueue(db, queue=queue, lock_key="k")
    step = QueueConnection(control)
    claimed = {j.job_id: j for j in (await step.claim(queue, "w", 4)).claimed}
    assert set(claimed) == {other_id, held_id}

    results, batch = await step.finish_succeeded_and_claim([_success(claimed[other_id])], queue, "w", 4)

    assert results[other_id].status == "succeeded"
    assert batch.claimed == [] and batch.candidates == 0
    assert (await job_row(db, waiting_id))["status"] == "queued"


async def test_a_paused_queue_or_task_claims_nothing_but_the_finish_is_written(db, control):
    queue = _queue()
    job_id = await enqueue(db, queue=queue)
    step = QueueConnection(control)
    (job,) = (await step.claim(queue, "w", 1)).claimed
    waiting = await enqueue(db, queue=queue)
    await db.execute("INSERT INTO dl_queue_flow (queue, paused) VALUES ($1, true)", queue)

    results, batch = await step.finish_succeeded_and_claim([_success(job)], queue, "w", 4)
    assert results[job_id].status == "succeeded" and batch.candidates == 0

    await db.execute("DELETE FROM dl_queue_flow WHERE queue = $1", queue)
    await db.execute("INSERT INTO dl_task_flow (queue, task, paused) VALUES ($1, 'dl.noop', true)", queue)
    _, batch = await step.finish_succeeded_and_claim([], queue, "w", 4)
    assert batch.candidates == 0
    await db.execute("DELETE FROM dl_task_flow WHERE queue = $1", queue)
    _, batch = await step.finish_succeeded_and_claim([], queue, "w", 4)
    assert [j.job_id for j in batch.claimed] == [waiting]


@pytest.mark.parametrize("setting", ["concurrency = 5", "rate_limit = 5, rate_period_sec = 1", "fair_share = true"])
async def test_a_limited_or_fair_queue_is_left_to_its_own_claim(db, control, setting):
    queue = _queue()
    await enqueue(db, queue=queue)
    await db.execute("INSERT INTO dl_queue_flow (queue) VALUES ($1)", queue)
    await db.execute(f"UPDATE dl_queue_flow SET {setting} WHERE queue = $1", queue)
    _, batch = await QueueConnection(control).finish_succeeded_and_claim([], queue, "w", 4)
    assert batch.candidates == 0


async def test_a_parked_head_is_unparked_by_the_finish_and_claimed_by_the_next_claim(db, control):
    """The unpark of a hot key's next head (dl_unpark_key_heads) is not visible to the claim of the
    same statement: that head is claimed by the next claim (the worker does not use this statement
    when it knows a finish hands a parked key over; it claims in a later statement of the step)."""
    queue = _queue()
    holder_id = await enqueue(db, queue=queue, lock_key="hot")
    waiters = [await enqueue(db, queue=queue, lock_key="hot") for _ in range(3)]
    step = QueueConnection(control)
    (holder,) = (await step.claim(queue, "w", 1)).claimed
    assert holder.job_id == holder_id
    assert await step.park_key_waiters(holder.job_id, holder.attempt, 100) == 3

    results, batch = await step.finish_succeeded_and_claim([_success(holder)], queue, "w", 4)

    assert results[holder_id].status == "succeeded" and batch.claimed == []
    head = await job_row(db, waiters[0])
    assert (head["status"], head["key_parked"]) == ("queued", False)
    _, batch = await step.finish_succeeded_and_claim([], queue, "w", 4)
    assert [j.job_id for j in batch.claimed] == [waiters[0]]


async def test_only_plain_successes_are_finished_by_it(db, control):
    job = ClaimedJob(job_id=uuid.uuid4(), queue="q", task="t", args={}, lock_key="k", partition_key="",
                     lease_ttl_sec=60, attempt=1, max_attempts=3, wait_sec=0.0, lock_hash=1)
    failed = FinishRequest(job_id=job.job_id, attempt=1, outcome="error", lock_key="k", unlock=True, error="x")
    with pytest.raises(ValueError, match="plain successes only"):
        await QueueConnection(control).finish_succeeded_and_claim([failed], "q", "w", 4)
