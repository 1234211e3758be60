"""A run of steps asks the database whether its attempt still holds the run once per lease window,
not once per step: the history's read and each fenced record say how long the lease has left."""

from __future__ import annotations

import logging
import uuid

import asyncpg
import pytest

from dataloader import App
from dataloader.storage.workflow_repository import WorkflowRepository
from dataloader.workflows.context import Suspend, Workflow, lease_clock


class CountingRepository(WorkflowRepository):
    def __init__(self, pool: asyncpg.Pool) -> None:
        super().__init__(pool)
        self.asked = 0

    async def step_may_start(self, run_id: uuid.UUID, attempt: int) -> float | None:
        self.asked += 1
        return await super().step_may_start(run_id, attempt)


async def _running(app: App, wdb: asyncpg.Pool, dsn: str, lease: str) -> uuid.UUID:
    run_id = await app.workflows.start("t.steps", {"dsn": dsn})
    await wdb.execute("UPDATE dl_jobs SET status = 'running', attempt = 1, "
                      "lease_expires_at = now() + $2::text::interval WHERE job_id = $1", run_id, lease)
    return run_id


def _attempt(run_id: uuid.UUID, repo: WorkflowRepository, history, loaded_at: float) -> Workflow:
    return Workflow(run_id=run_id, workflow="t.steps", input={}, attempt=1, history=history, repo=repo,
                    queue_of=lambda name: None, lease_ttl_sec=60, log=logging.getLogger("test"), loaded_at=loaded_at)


async def test_steps_inside_the_window_do_not_ask_and_each_record_renews_it(app: App, wdb: asyncpg.Pool, dsn: str):
    run_id = await _running(app, wdb, dsn, "60 s")
    repo = CountingRepository(wdb)
    loaded_at = lease_clock()
    history = await repo.history(run_id, 1)
    assert history is not None and 55 < (history.lease_left_sec or 0) <= 60
    wf = _attempt(run_id, repo, history, loaded_at)
    assert [await wf.step(name, lambda n=n: n) for n, name in enumerate(("one", "two", "three"))] == [0, 1, 2]
    assert repo.asked == 0
    assert await wdb.fetchval("SELECT count(*) FROM dl_workflow_steps WHERE run_id = $1 AND state = 'done'",
                              run_id) == 3


async def test_past_the_window_a_step_asks_and_a_lost_attempt_runs_nothing(app: App, wdb: asyncpg.Pool, dsn: str):
    """The history said 60 s were left, but that was long ago on this machine's clock (a node that
    stalled or slept): the step asks, and the database says the run was taken back."""
    run_id = await _running(app, wdb, dsn, "60 s")
    repo = CountingRepository(wdb)
    history = await repo.history(run_id, 1)
    await wdb.execute("UPDATE dl_jobs SET attempt = 2 WHERE job_id = $1", run_id)  # reaped and claimed again
    ran: list[int] = []
    with pytest.raises(Suspend):
        await _attempt(run_id, repo, history, lease_clock() - 59).step("one", lambda: ran.append(1))
    assert repo.asked == 1 and ran == []


async def test_a_short_lease_left_is_trusted_only_for_what_is_left_less_the_margin(app: App, wdb: asyncpg.Pool,
                                                                                     dsn: str):
    run_id = await _running(app, wdb, dsn, "1.5 s")  # less than the 2 s margin of a 60 s lease
    repo = CountingRepository(wdb)
    loaded_at = lease_clock()
    history = await repo.history(run_id, 1)
    await wdb.execute("UPDATE dl_jobs SET lease_expires_at = now() + interval '60 s' WHERE job_id = $1", run_id)
    assert await _attempt(run_id, repo, history, loaded_at).step("one", lambda: 1) == 1
    assert repo.asked == 1
