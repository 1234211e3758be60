"""DESIGN promise 4 on the secondary paths: bulk operations, retry, restartable re-trigger, the
queue-time flags, schedule ticks and chain stages. The technique of test_journal_atomicity.py: the
database refuses one kind of journal row (a trigger that raises), the real code path runs, and the
state it would have changed must be exactly as it was. Had the journal row been written in a
transaction of its own, the state change would have committed without it. Then the journal opens
again and the same path does its work, with its row."""

from __future__ import annotations

import asyncio
import datetime as dt
import uuid

import asyncpg
import pytest

from dataloader import Stage
from dataloader.jobs.manager import JobRequest
from dataloader.jobs.queue_time import QueueTimeChecker, QueueTimeSettings
from dataloader.model.clock import ManualClock
from dataloader.operations.runner import OperationRunner, OperationRunnerSettings
from dataloader.schedules.manager import ScheduleManager
from dataloader.schedules.scheduler import Scheduler
from dataloader.storage.operation_repository import OperationRepository, QueueTimeRepository
from dataloader.storage.schedule_repository import ScheduleRepository
from tests.conftest import wait_until
from tests.retention.rows import add_job
from tests.storage.test_journal_atomicity import Rejections, journal_refuses
from tests.support.engine import enqueue, event_kinds, job_row, job_service, running_engine

JOB_STATE = ("status", "attempt", "priority", "args", "available_at", "cancel_requested", "finished_at",
             "error", "queue_overdue_at", "attempts_before_retry")


async def _state(db: asyncpg.Pool, job_ids: list[uuid.UUID]) -> dict[uuid.UUID, tuple]:
    rows = await db.fetch(f"SELECT job_id, {', '.join(JOB_STATE)} FROM dl_jobs WHERE job_id = ANY($1)", job_ids)
    return {r["job_id"]: tuple(r[c] for c in JOB_STATE) for r in rows}


async def _at_least(refused: Rejections, n: int) -> bool:
    return await refused.count() >= n


# -- bulk operations ------------------------------------------------------------------------------

@pytest.fixture
async def ops(db: asyncpg.Pool, dsn: str):
    from dataloader.app import App
    from tests.operations.conftest import ops_settings

    await db.execute("TRUNCATE dl_operations, dl_operation_events")
    async with App(ops_settings(dsn)) as app:
        yield app.operations


@pytest.mark.parametrize(("kind", "params", "statuses", "journal_kind", "after"), [
    ("requeue", None, ("failed", "canceled"), "requeue", "queued"),
    ("cancel", None, ("queued", "queued"), "canceled", "canceled"),
    ("set_priority", {"priority": 7}, ("queued", "queued"), "priority_changed", None),
])
async def test_a_bulk_batch_whose_journal_rows_are_refused_changes_no_job(db, ops, kind, params, statuses,
                                                                          journal_kind, after):
    jobs = [await enqueue(db, queue="atomic-ops", priority=100,
                          available_at=dt.datetime.now(dt.UTC) + dt.timedelta(hours=1)) if s == "queued"
            else await add_job(db, queue="atomic-ops", status=s, finished_ago=10, error="boom") for s in statuses]
    before = await _state(db, jobs)
    op = await ops.start(kind, {"queues": ["atomic-ops"]}, params=params)
    runner = OperationRunner(OperationRepository(db), OperationRunnerSettings(period_sec=0.05, lease_sec=5.0,
                                                                              retry_pause_sec=0.05), owner="n")
    async with journal_refuses(db, journal_kind) as refused:
        ticking = asyncio.create_task(runner.tick())  # retries its batch while the journal refuses
        try:
            await wait_until(lambda: _at_least(refused, 2), timeout=20, message="the batch to be tried")
            assert await _state(db, jobs) == before, f"jobs changed without their '{journal_kind}' rows"
            assert ((await ops.get(op.id)).done, (await ops.get(op.id)).changed) == (0, 0)
        except BaseException:
            ticking.cancel()
            raise
    await asyncio.wait_for(ticking, timeout=20)
    finished = await ops.get(op.id)
    assert (finished.state, finished.changed) == ("finished", 2)
    for job_id in jobs:
        row = await job_row(db, job_id)
        assert row["status"] == (after or "queued") and (after is not None or row["priority"] == 7)
        assert (await event_kinds(db, job_id)).count(journal_kind) == 1


# -- retry, restartable re-trigger -----------------------------------------------------------------

async def test_a_retry_whose_journal_row_is_refused_leaves_the_job_failed(db):
    job_id = await add_job(db, queue="atomic", status="failed", finished_ago=10, error="boom")
    before = await _state(db, [job_id])
    async with journal_refuses(db, "requeue") as refused:
        with pytest.raises(asyncpg.RaiseError):
            await job_service(db).retry(job_id)
        assert await refused.count() == 1
    assert await _state(db, [job_id]) == before, "the job went back to the queue without its 'requeue' row"
    assert (await job_service(db).retry(job_id)).status == "queued"
    assert (await event_kinds(db, job_id)).count("requeue") == 1


async def test_a_restartable_retrigger_whose_journal_row_is_refused_keeps_the_queued_job_as_it_was(db):
    later = dt.datetime.now(dt.UTC) + dt.timedelta(hours=1)
    service = job_service(db)

    def request(n: int) -> JobRequest:
        return JobRequest(queue="atomic", task="dl.noop", lock_key="restart-me", restartable=True,
                          args={"n": n}, available_at=later + dt.timedelta(minutes=n))

    first = (await service.trigger(request(1))).job.id
    before = await _state(db, [first])
    async with journal_refuses(db, "retriggered") as refused:
        with pytest.raises(asyncpg.RaiseError):
            await service.trigger(request(2))
        assert await refused.count() == 1
    assert await _state(db, [first]) == before, "the queued job took the new args without a 'retriggered' row"
    again = await service.trigger(request(2))
    assert again.job.id == first and (await job_row(db, first))["args"] == {"n": 2}
    assert await event_kinds(db, first) == ["queued", "retriggered"]


# -- queue-time flags ------------------------------------------------------------------------------

@pytest.mark.parametrize(("fail", "journal_kind"), [(False, "queue_overdue"), (True, "failed")])
async def test_a_queue_time_flag_whose_journal_row_is_refused_changes_nothing(db, fail, journal_kind):
    job_id = await add_job(db, queue="atomic-slow", status="queued", finished_ago=None, created_ago=600)
    before = await _state(db, [job_id])
    checker = QueueTimeChecker(QueueTimeRepository(db), QueueTimeSettings(
        period_sec=1, limits={"atomic-slow": (300.0, fail)}))
    async with journal_refuses(db, journal_kind) as refused:
        with pytest.raises(asyncpg.RaiseError):
            await checker.tick()
        assert await refused.count() == 1
    assert await _state(db, [job_id]) == before, f"flagged without its '{journal_kind}' row"
    assert await checker.tick() == 1
    row = await job_row(db, job_id)
    assert (row["status"], row["queue_overdue_at"] is not None) == ("failed" if fail else "queued", True)
    assert (await event_kinds(db, job_id)).count(journal_kind) == 1


# -- schedule ticks --------------------------------------------------------------------------------

async def test_a_schedule_tick_whose_queued_row_is_refused_enqueues_nothing_and_does_not_advance(db):
    await db.execute("TRUNCATE dl_schedules, dl_schedule_runs")
    start = dt.datetime(2030, 1, 1, tzinfo=dt.UTC)
    clock = ManualClock(wall_start=start)
    repo = ScheduleRepository(db)
    service = ScheduleManager(repo, clock=clock)
    created = await service.create(service.spec(name="atomic-tick", task="dl.noop", every=dt.timedelta(minutes=1),
                                                queue="atomic"))
    scheduler = Scheduler(repo, clock=clock)
    clock.advance(60)
    async with journal_refuses(db, "queued") as refused:
        with pytest.raises(asyncpg.RaiseError):
            await scheduler.tick()
        assert await refused.count() == 1
    assert await db.fetchval("SELECT count(*) FROM dl_jobs WHERE queue = 'atomic'") == 0
    assert await db.fetchval("SELECT count(*) FROM dl_schedule_runs WHERE schedule_name = 'atomic-tick'") == 0
    assert (await service.get("atomic-tick")).next_run_at == created.next_run_at, "the tick advanced, enqueuing nothing"
    await scheduler.tick()  # the journal open again: the same tick enqueues its one job
    [job_id] = [r["job_id"] for r in await db.fetch("SELECT job_id FROM dl_jobs WHERE queue = 'atomic'")]
    assert await event_kinds(db, job_id) == ["queued"]
    assert (await service.get("atomic-tick")).next_run_at == created.next_run_at + dt.timedelta(minutes=1)


# -- chain stages ----------------------------------------------------------------------------------

async def test_a_stage_finish_whose_next_stage_queued_row_is_refused_changes_nothing(dsn, db):
    """The statement that finishes a stage as succeeded also enqueues the next: refusing the next
    stage's 'queued' row must leave the first stage running (no 'done'), and no next stage."""
    first = (await job_service(db).trigger(JobRequest(queue="atomic-chain", task="dl.noop", lock_key="c1",
                                                      then=[Stage("dl.noop", {"stage": 2})]))).job.id
    # the refusal starts before the worker (which would otherwise finish the stage first) and ends
    # while it keeps running, so the finish it keeps retrying lands then
    refusing = journal_refuses(db, "queued")
    refused = await refusing.__aenter__()
    open_again = False
    try:
        async with running_engine(dsn, db, queues={"atomic-chain": 1}, heartbeat_sec=30):
            await wait_until(lambda: _at_least(refused, 2), timeout=20, message="the finish to be attempted")
            row = await job_row(db, first)
            assert (row["status"], row["finished_at"]) == ("running", None), "the stage finished without its next"
            assert await db.fetchval("SELECT count(*) FROM dl_jobs WHERE chain_id = $1", first) == 1
            assert "done" not in await event_kinds(db, first)
            open_again = True
            await refusing.__aexit__(None, None, None)
            await wait_until(lambda: db.fetchval("SELECT count(*) = 2 AND bool_and(status = 'succeeded') "
                                                 "FROM dl_jobs WHERE chain_id = $1", first),
                             timeout=20, message="both stages")
    finally:
        if not open_again:
            await refusing.__aexit__(None, None, None)
    second = await db.fetchval("SELECT job_id FROM dl_jobs WHERE chain_id = $1 AND job_id <> $1", first)
    assert (await event_kinds(db, first)).count("done") == 1
    assert (await event_kinds(db, second))[0] == "queued"
