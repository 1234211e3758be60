"""DESIGN promise 4: a state change and its journal row commit together.

Each test makes the database refuse one kind of journal row (a trigger on dl_job_events that
raises, counting its refusals in a sequence, which a rollback does not undo) and then lets the real
code path change a job's state. Had the journal row been written in a transaction of its own, the
state change would have committed without it; here the state must stay exactly as it was."""

from __future__ import annotations

import datetime as dt
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import asyncpg
import pytest

from dataloader.jobs.manager import JobRequest
from dataloader.jobs.reaper import Reaper
from dataloader.storage.queue_connection import QueueConnection
from dataloader.storage.repositories import JobRepository
from tests.conftest import wait_until
from tests.support.engine import enqueue, event_kinds, job_row, job_service, running_engine


class Rejections:
    def __init__(self, pool: asyncpg.Pool) -> None:
        self.pool = pool

    async def count(self) -> int:
        row = await self.pool.fetchrow("SELECT last_value, is_called FROM dl_test_rejections")
        return row["last_value"] if row["is_called"] else 0


@asynccontextmanager
async def journal_refuses(pool: asyncpg.Pool, kind: str) -> AsyncIterator[Rejections]:
    """While inside: every INSERT of a dl_job_events row of `kind` raises (and is counted)."""
    await pool.execute("""
        CREATE SEQUENCE dl_test_rejections;
        CREATE FUNCTION dl_test_reject_event() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            PERFORM nextval('dl_test_rejections');
            RAISE EXCEPTION 'test: journal row of kind % refused', NEW.kind;
        END $$;
    """)
    try:
        await pool.execute(f"CREATE TRIGGER dl_test_reject BEFORE INSERT ON dl_job_events FOR EACH ROW "
                           f"WHEN (NEW.kind = '{kind}') EXECUTE FUNCTION dl_test_reject_event()")
        yield Rejections(pool)
    finally:
        await pool.execute("DROP TRIGGER IF EXISTS dl_test_reject ON dl_job_events; "
                           "DROP FUNCTION IF EXISTS dl_test_reject_event(); "
                           "DROP SEQUENCE IF EXISTS dl_test_rejections")


async def _status_is(db, job_id, status):
    return (await job_row(db, job_id))["status"] == status


@pytest.mark.parametrize(("task", "args", "kind", "final"), [
    ("dl.noop", {}, "done", "succeeded"),
    ("dl.fail", {"fatal": True}, "failed", "failed"),
    ("dl.fail", {}, "requeue", "queued"),  # a retry
])
async def test_a_finish_whose_journal_row_is_refused_changes_nothing(dsn, db, task, args, kind, final):
    async with running_engine(dsn, db, queues={"default": 1}, heartbeat_sec=30):
        async with journal_refuses(db, kind) as refused:
            job_id = await enqueue(db, task, args=args)
            # the worker tried to write the finish, twice (it retries a failed step), and was refused
            await wait_until(lambda: _at_least(refused, 2), timeout=20,
                             message=f"the finish ({kind}) to be attempted")
            row = await job_row(db, job_id)
            assert (row["status"], row["attempt"], row["finished_at"]) == ("running", 1, None), \
                f"the state changed without its '{kind}' journal row"
            assert kind not in await event_kinds(db, job_id)
        # journal open again: the finish the worker kept retrying now lands, with its row
        await wait_until(lambda: _status_is(db, job_id, final), timeout=20)
    row = await job_row(db, job_id)
    assert row["attempt"] == 1
    kinds = await event_kinds(db, job_id)
    assert kinds.count(kind) == 1 and kinds[-1] == kind


async def _at_least(refused: Rejections, n: int) -> bool:
    return await refused.count() >= n


async def test_a_claim_whose_picked_row_is_refused_leaves_the_job_queued(dsn, db):
    async with running_engine(dsn, db, queues={"default": 1}):
        async with journal_refuses(db, "picked") as refused:
            job_id = await enqueue(db, "dl.noop")
            await wait_until(lambda: _at_least(refused, 2), timeout=20, message="the claim to be attempted")
            row = await job_row(db, job_id)
            assert (row["status"], row["attempt"], row["started_at"], row["lease_expires_at"]) == \
                ("queued", 0, None, None), "the job was claimed without its 'picked' journal row"
        await wait_until(lambda: _status_is(db, job_id, "succeeded"), timeout=20)
    assert await event_kinds(db, job_id) == ["queued", "picked", "done"]


async def test_an_enqueue_whose_queued_row_is_refused_inserts_no_job(db):
    service = job_service(db)
    async with journal_refuses(db, "queued") as refused:
        with pytest.raises(asyncpg.RaiseError):
            await service.trigger(JobRequest(queue="default", task="dl.noop", lock_key="k"))
        with pytest.raises(asyncpg.RaiseError):
            await service.trigger(JobRequest(queue="default", task="dl.noop", lock_key="k", idempotency_key="i"))
        with pytest.raises(asyncpg.RaiseError):
            await service.trigger_many([JobRequest(queue="default", task="dl.noop", lock_key=f"k{i}")
                                        for i in range(3)])
        assert await refused.count() == 3  # one per statement: the batch stops at its first row
    assert await db.fetchval("SELECT count(*) FROM dl_jobs") == 0, "a job was enqueued without its journal row"
    # and the idempotency key was not taken by a half-written job
    again = await service.trigger(JobRequest(queue="default", task="dl.noop", lock_key="k", idempotency_key="i"))
    assert again.created


async def test_a_cancel_whose_journal_row_is_refused_changes_nothing(db):
    queued = await enqueue(db, "dl.noop", available_at=dt.datetime.now(dt.UTC) + dt.timedelta(hours=1))
    async with journal_refuses(db, "canceled"):
        with pytest.raises(asyncpg.RaiseError):
            await job_service(db).cancel(queued)
    row = await job_row(db, queued)
    assert (row["status"], row["cancel_requested"], row["finished_at"]) == ("queued", False, None)

    running = await enqueue(db, "dl.noop")
    conn = await db.acquire()
    try:
        job = await QueueConnection(conn).claim_one("default", "test")
        assert job.job_id == running
        async with journal_refuses(db, "cancel_requested"):
            with pytest.raises(asyncpg.RaiseError):
                await job_service(db).cancel(running)
        row = await job_row(db, running)
        assert (row["status"], row["cancel_requested"]) == ("running", False)
        # the heartbeat (the running worker's view) shows no cancel either
        assert await QueueConnection(conn).heartbeat([(running, job.attempt)]) == {running: False}
    finally:
        await conn.execute("SELECT pg_advisory_unlock_all()")
        await db.release(conn)
    assert "cancel_requested" not in await event_kinds(db, running)


async def test_a_reap_or_heartbeat_whose_journal_row_is_refused_changes_nothing(db):
    job_id = await enqueue(db, "dl.noop")
    conn = await db.acquire()
    try:
        job = await QueueConnection(conn).claim_one("default", "crashed-worker")
        await db.execute("UPDATE dl_jobs SET lease_expires_at = now() - interval '1 second' WHERE job_id=$1", job_id)
        before = await job_row(db, job_id)
        async with journal_refuses(db, "requeue"):
            with pytest.raises(asyncpg.RaiseError):
                await Reaper(JobRepository(db), period=1).tick()
        async with journal_refuses(db, "heartbeat"):
            with pytest.raises(asyncpg.RaiseError):
                await QueueConnection(conn).heartbeat([(job_id, job.attempt)])
        after = await job_row(db, job_id)
        assert (after["status"], after["attempt"], after["lease_expires_at"], after["heartbeat_at"], after["error"]) \
            == (before["status"], before["attempt"], before["lease_expires_at"], before["heartbeat_at"], None)
        assert await event_kinds(db, job_id) == ["queued", "picked"]
        assert await Reaper(JobRepository(db), period=1).tick() == 1  # and with the journal open, it works
    finally:
        await conn.execute("SELECT pg_advisory_unlock_all()")
        await db.release(conn)
