"""A workflow attempt that no longer holds its run's job writes nothing and runs no step."""

from __future__ import annotations

import logging

import asyncpg
import pytest

from dataloader import App
from dataloader.storage.workflow_repository import WorkflowRepository
from dataloader.workflows.context import Suspend, Workflow


async def test_an_attempt_that_lost_its_job_runs_no_step(app: App, wdb: asyncpg.Pool, dsn: str) -> None:
    """A zombie attempt: its node stalled past the lease; the reaper took the run back and another
    attempt replayed it and recorded step one. The zombie's history, read before all that, lacks the
    step: it must not run the function again (nor when the lease has merely run out, not yet reaped)."""
    run_id = await app.workflows.start("t.steps", {"dsn": dsn})
    repo = WorkflowRepository(wdb)
    await wdb.execute("UPDATE dl_jobs SET status = 'running', attempt = 1, lease_expires_at = now() + interval '60 s' "
                      "WHERE job_id = $1", run_id)
    history = await repo.history(run_id)
    assert history is not None and history.steps == {}
    ran: list[str] = []

    def attempt_one() -> Workflow:
        return Workflow(run_id=run_id, workflow="t.steps", input={}, attempt=1, history=history, repo=repo,
                        queue_of=lambda name: None, lease_ttl_sec=60, log=logging.getLogger("test"))

    # the control: with its lease held, the step runs and is recorded
    assert await attempt_one().step("one", lambda: ran.append("held") or 1) == 1
    await wdb.execute("DELETE FROM dl_workflow_steps WHERE run_id = $1", run_id)
    # the lease ran out by the database's clock; the reaper has not come yet
    await wdb.execute("UPDATE dl_jobs SET lease_expires_at = now() - interval '1 s' WHERE job_id = $1", run_id)
    with pytest.raises(Suspend):
        await attempt_one().step("one", lambda: ran.append("expired") or 1)
    # reaped and claimed again: attempt 2 replayed the run and recorded step one
    await wdb.execute("UPDATE dl_jobs SET attempt = 2, lease_expires_at = now() + interval '60 s' WHERE job_id = $1",
                      run_id)
    assert (await repo.record(run_id, 2, 1, "step", "one", "done", result_json="2", attempts=1)).live
    with pytest.raises(Suspend):
        await attempt_one().step("one", lambda: ran.append("zombie") or 1)
    assert ran == ["held"]
    assert await wdb.fetchval("SELECT result::text FROM dl_workflow_steps WHERE run_id = $1 AND seq = 1", run_id) == "2"
