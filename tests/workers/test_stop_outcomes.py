"""An attempt whose pipeline saw a stop request and then returned ends as the stop says: a cancel
ends the job `canceled`, a shutdown puts it back to `queued` without using an attempt. A pipeline
that never looked at the stop finished its work, and succeeds. Both halves are tested, for a sync
function (the README tells them to poll ctx.stop_requested) and a plain coroutine."""

from __future__ import annotations

from tests.conftest import wait_until
from tests.support.engine import enqueue, event_kinds, job_row, job_service, running_engine


async def _status_is(db, job_id, status):
    return (await job_row(db, job_id))["status"] == status


async def test_a_sync_pipeline_that_returns_on_cancel_ends_canceled(dsn, db):
    async with running_engine(dsn, db):
        job_id = await enqueue(db, "test.sync_polls_and_returns", args={"seconds": 30})
        await wait_until(lambda: _status_is(db, job_id, "running"), timeout=10)
        await job_service(db).cancel(job_id)
        await wait_until(lambda: _status_is(db, job_id, "canceled"), timeout=10)
    row = await job_row(db, job_id)
    assert row["cancel_requested"] and row["error"] == "canceled by request"
    assert (await event_kinds(db, job_id))[-1] == "canceled"


async def test_a_sync_pipeline_that_returns_on_shutdown_goes_back_to_the_queue(dsn, db):
    async with running_engine(dsn, db, shutdown_timeout_sec=10):
        job_id = await enqueue(db, "test.sync_polls_and_returns", args={"seconds": 30})
        await wait_until(lambda: _status_is(db, job_id, "running"), timeout=10)
    # leaving the block stopped the engine as SIGTERM does
    row = await job_row(db, job_id)
    assert (row["status"], row["attempt"], row["finished_at"]) == ("queued", 0, None)
    last = await db.fetchrow("SELECT kind, payload FROM dl_job_events WHERE job_id=$1 ORDER BY event_id DESC LIMIT 1",
                             job_id)
    assert last["kind"] == "requeue" and last["payload"]["reason"] == "shutdown"


async def test_a_pipeline_that_never_looked_at_the_stop_finished_its_work(dsn, db):
    async with running_engine(dsn, db, shutdown_timeout_sec=10):
        job_id = await enqueue(db, "test.async_unaware", args={"seconds": 1.0})
        await wait_until(lambda: _status_is(db, job_id, "running"), timeout=10)
    row = await job_row(db, job_id)
    assert (row["status"], row["attempt"]) == ("succeeded", 1)
