"""Bulk operations in one process against real PostgreSQL: dry run, batches with an exact count and
one journal row per changed job, every kind's compare-and-set, pause / resume / cancel between
batches, the lease fence after a takeover, bad input, and a recovery requeue racing the late
finish of the attempt it recovers (one terminal state)."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from dataloader import JobContext, pipeline
from dataloader.exceptions import InvalidJobRequest, OperationNotFound, OperationStateConflict
from dataloader.jobs.reaper import Reaper
from dataloader.operations.runner import OperationRunner, OperationRunnerSettings
from dataloader.storage.operation_repository import OperationRepository
from dataloader.storage.repositories import JobRepository
from tests.conftest import wait_until
from tests.retention.rows import add_job
from tests.support.engine import enqueue, job_row, running_engine


def runner(db, owner: str = "node-a", **settings: float) -> OperationRunner:
    values = {"period_sec": 0.05, "lease_sec": 5.0, "retry_pause_sec": 0.05, **settings}
    return OperationRunner(OperationRepository(db), OperationRunnerSettings(**values), owner=owner)


async def bulk_events(db, operation_id) -> dict[uuid.UUID, int]:
    rows = await db.fetch("SELECT job_id, count(*) AS n FROM dl_job_events WHERE payload->>'operation_id' = $1 "
                          "GROUP BY job_id", str(operation_id))
    return {r["job_id"]: r["n"] for r in rows}


async def test_requeue_in_batches_changes_each_job_once(app_on_db, db):
    failed = [await add_job(db, queue="bq", status="failed", finished_ago=100 + i, error="boom") for i in range(47)]
    others = [await add_job(db, queue="bq", status="succeeded", finished_ago=50),
              await add_job(db, queue="other", status="failed", finished_ago=50, error="boom")]
    dry = await app_on_db.operations.start("requeue", {"queues": ["bq"], "statuses": ["failed"]}, dry_run=True)
    assert dry.total == 47
    assert await db.fetchval("SELECT count(*) FROM dl_operations") == 0  # a dry run writes nothing
    op = await app_on_db.operations.start("requeue", {"queues": ["bq"], "statuses": ["failed"]},
                                          started_by="alice", batch_size=10)
    assert (op.state, op.total, op.done, op.started_by) == ("running", 47, 0, "alice")
    assert await runner(db).tick() == 5
    op = await app_on_db.operations.get(op.id)
    assert (op.state, op.done, op.changed, op.skipped) == ("finished", 47, 47, 0)
    assert await bulk_events(db, op.id) == dict.fromkeys(failed, 1)
    statuses = {r["job_id"]: r["status"] for r in await db.fetch("SELECT job_id, status::text FROM dl_jobs")}
    assert all(statuses[j] == "queued" for j in failed)
    assert [statuses[j] for j in others] == ["succeeded", "failed"]
    assert [e.kind for e in await app_on_db.operations.events(op.id)] == ["created", "started", "finished"]
    # finished: nothing more to take, and it can no longer be paused or resumed
    assert await runner(db).tick() == 0
    with pytest.raises(OperationStateConflict):
        await app_on_db.operations.pause(op.id)


async def test_a_job_that_matches_again_is_not_handled_twice(app_on_db, db):
    """The cursor passes every job examined: requeued, failed again and matching again, a job is
    still behind the cursor, and jobs created after the start are left alone."""
    jobs = [await add_job(db, queue="again", status="failed", finished_ago=100 + i) for i in range(6)]
    op = await app_on_db.operations.start("requeue", {"queues": ["again"], "statuses": ["failed"]}, batch_size=3)
    r = runner(db)
    repo = OperationRepository(db)
    claimed = await repo.claim("node-a", 5)
    first = await repo.run_batch(op.id, "node-a", claimed["lease_epoch"], 5, r_parse)
    assert (first.examined, first.changed) == (3, 3)
    await db.execute("UPDATE dl_jobs SET status = 'failed' WHERE job_id = ANY($1)", jobs)  # fail again
    late = await add_job(db, queue="again", status="failed", finished_ago=0)  # after the snapshot
    rest = await repo.run_batch(op.id, "node-a", claimed["lease_epoch"], 5, r_parse)
    assert (rest.examined, rest.changed) == (3, 3)
    assert (await repo.run_batch(op.id, "node-a", claimed["lease_epoch"], 5, r_parse)).finished
    assert await bulk_events(db, op.id) == dict.fromkeys(jobs, 1)
    assert (await job_row(db, late))["status"] == "failed"
    del r


def r_parse(value):
    from dataloader.jobs.search import parse_filter

    return parse_filter(value)


async def test_a_taken_over_runner_is_fenced_off(app_on_db, db):
    await add_job(db, queue="fq", status="lost", finished_ago=10)
    op = await app_on_db.operations.start("requeue", {"queues": ["fq"]}, batch_size=1)
    repo = OperationRepository(db)
    a = await repo.claim("node-a", 5)
    await db.execute("UPDATE dl_operations SET lease_expires_at = now() - interval '1 second'")
    b = await repo.claim("node-b", 5)
    assert (b["previous_owner"], b["lease_epoch"]) == ("node-a", a["lease_epoch"] + 1)
    fenced = await repo.run_batch(op.id, "node-a", a["lease_epoch"], 5, r_parse)
    assert fenced.row is None and fenced.examined == 0
    assert (await app_on_db.operations.get(op.id)).done == 0
    done = await repo.run_batch(op.id, "node-b", b["lease_epoch"], 5, r_parse)
    assert (done.examined, done.changed) == (1, 1)
    kinds = [e.kind for e in await app_on_db.operations.events(op.id)]
    assert kinds[:3] == ["created", "started", "taken_over"]


async def test_pause_resume_and_cancel_land_between_batches(app_on_db, db):
    for i in range(30):
        await add_job(db, queue="pq", status="failed", finished_ago=100 + i)
    ops = app_on_db.operations
    op = await ops.start("requeue", {"queues": ["pq"]}, batch_size=2, started_by="bob")
    run = runner(db, batch_pause_sec=0.05)
    await run.start()
    try:
        await wait_until(lambda: _done(ops, op.id, 4), timeout=20)
        paused = await ops.pause(op.id, actor="bob")
        assert paused.state == "paused"
        # A paused operation is not worked: its count stays. Not a sleep: two of the runner's ticks
        # (the one in flight, which saw the pause, and a whole one after it), then two more.
        await ticks_pass(run)
        still = (await ops.get(op.id)).done
        await ticks_pass(run)
        assert (await ops.get(op.id)).done == still < 30
        with pytest.raises(OperationStateConflict):
            await ops.pause(op.id)
        await ops.resume(op.id, actor="carol")
        await wait_until(lambda: _done(ops, op.id, still + 4), timeout=20)
        canceled = await ops.cancel(op.id, actor="carol")
        assert canceled.state == "canceled" and canceled.finished_at is not None
        await ticks_pass(run)
        final = (await ops.get(op.id)).done
        await ticks_pass(run)
        after = await ops.get(op.id)
        assert after.done == final < 30 and after.changed == final
        assert len(await bulk_events(db, op.id)) == final
    finally:
        await run.stop()
    trail = [(e.kind, e.actor) for e in await ops.events(op.id)]
    assert ("paused", "bob") in trail and ("resumed", "carol") in trail and trail[-1] == ("canceled", "carol")


async def ticks_pass(run: OperationRunner, count: int = 2) -> None:
    """Wait until the runner has ended `count` more ticks: "nothing happens" is checked on the
    runner's own progress, not on a guess of how long it takes (a loaded machine made 0.3 s short)."""
    target = run.ticks + count
    await wait_until(lambda: run.ticks >= target, timeout=30, message=f"{count} more ticks of the runner")


async def _done(ops, operation_id, at_least: int) -> bool:
    return (await ops.get(operation_id)).done >= at_least


async def test_cancel_delete_and_set_priority(app_on_db, db):
    """Each kind is checked on the jobs' rows in the database, the ones it must change and the ones
    it must leave alone (finished jobs keep their status and priority; another queue is untouched)."""
    queued = [await enqueue(db, queue="kq", priority=100) for _ in range(3)]
    finished = [await add_job(db, queue="kq", status=s, finished_ago=10) for s in ("succeeded", "failed")]
    bystander = await enqueue(db, queue="other-kq", priority=100)

    async def rows() -> dict[uuid.UUID, tuple[str, int]]:
        found = await db.fetch("SELECT job_id, status::text, priority FROM dl_jobs WHERE queue IN ('kq', 'other-kq')")
        return {r["job_id"]: (r["status"], r["priority"]) for r in found}

    before = await rows()
    assert {before[j][0] for j in queued} == {"queued"}
    ops = app_on_db.operations
    prio = await ops.start("set_priority", {"queues": ["kq"]}, params={"priority": 7})
    await runner(db).tick()
    prio = await ops.get(prio.id)
    assert (prio.done, prio.changed) == (5, 3)  # finished jobs are examined, not changed
    assert await rows() == {**before, **{j: ("queued", 7) for j in queued}}
    cancel = await ops.start("cancel", {"queues": ["kq"], "statuses": ["queued"]})
    await runner(db).tick()
    assert (await ops.get(cancel.id)).changed == 3
    assert await rows() == {**before, **{j: ("canceled", 7) for j in queued}}
    delete = await ops.start("delete", {"queues": ["kq"]})
    await runner(db).tick()
    assert (await ops.get(delete.id)).changed == 5
    assert await rows() == {bystander: before[bystander]}  # every kq job is gone, finished ones too
    assert set(before) == {*queued, *finished, bystander}


@pytest.mark.parametrize("kind, filter, params, message", [
    ("explode", {}, None, "unknown operation kind"),
    ("set_priority", {}, {"priority": -1}, "priority"),
    ("set_priority", {}, {"priority": "high"}, "priority"),
    ("requeue", {}, {"priority": 1}, "takes no params"),
    ("requeue", {"statuses": ["nope"]}, None, "statuses"),
    ("requeue", {"args_path": "$.a ? (@ =="}, None, "jsonpath"),
])
async def test_bad_operations_are_refused_and_write_nothing(app_on_db, db, kind, filter, params, message):
    with pytest.raises(InvalidJobRequest, match=message):
        await app_on_db.operations.start(kind, filter, params=params)
    assert await db.fetchval("SELECT count(*) FROM dl_operations") == 0
    with pytest.raises(OperationNotFound):
        await app_on_db.operations.get(uuid.uuid4())


GATES: dict[str, asyncio.Event] = {}


@pipeline("test.ops_gated", max_attempts=1)
async def ops_gated(ctx: JobContext):
    """Attempt 1 waits for its gate (while the reaper and a bulk requeue recover it); later attempts
    return at once."""
    if ctx.attempt == 1:
        await GATES[ctx.args["gate"]].wait()
    yield


async def test_recovery_requeue_racing_a_late_finish_ends_in_one_terminal_state(app_on_db, db, dsn):
    """Attempt 1 stalls; its lease runs out; the reaper marks the job lost (no attempt left); a bulk
    requeue recovers it (queued again). Then attempt 1 wakes up and finishes late: its finish is
    fenced (the row is no longer running with attempt 1), and once it let go of the lock_key,
    attempt 2 runs and succeeds. One terminal state, one 'done'."""
    gate = uuid.uuid4().hex
    GATES[gate] = asyncio.Event()
    job = await enqueue(db, "test.ops_gated", queue="race", args={"gate": gate}, max_attempts=1)
    async with running_engine(dsn, db, {"race": 2}, run_reaper=False, heartbeat_sec=30):
        await wait_until(lambda: _status(db, job, "running"), timeout=20)
        await db.execute("UPDATE dl_jobs SET lease_expires_at = now() - interval '1 second' WHERE job_id = $1", job)
        assert await Reaper(JobRepository(db)).tick() == 1
        assert (await job_row(db, job))["status"] == "lost"
        op = await app_on_db.operations.start("requeue", {"queues": ["race"], "statuses": ["lost"]})
        await runner(db).tick()
        assert (await app_on_db.operations.get(op.id)).changed == 1
        GATES[gate].set()  # the late finish of attempt 1
        await wait_until(lambda: _fenced_late(db, job), timeout=20)
    row = await job_row(db, job)
    assert (row["status"], row["attempt"]) == ("succeeded", 2)
    events = await db.fetch("SELECT kind, payload FROM dl_job_events WHERE job_id = $1 ORDER BY event_id", job)
    kinds = [e["kind"] for e in events]
    assert kinds.count("done") == 1 and kinds.count("lost") == 1 and kinds[-1] == "done", kinds
    assert [e["payload"].get("reason") for e in events if e["payload"] and e["payload"].get("operation_id")] == [
        "bulk_requeue"]


async def _status(db, job, status: str) -> bool:
    return (await job_row(db, job))["status"] == status


async def _fenced_late(db, job) -> bool:
    """Attempt 1 has ended in the worker (its task is gone) — its finish was refused."""
    from prometheus_client import REGISTRY

    value = REGISTRY.get_sample_value("dl_jobs_finished_total",
                                      {"queue": "race", "task": "test.ops_gated", "outcome": "fenced"})
    return bool(value) and (await job_row(db, job))["status"] == "succeeded"
