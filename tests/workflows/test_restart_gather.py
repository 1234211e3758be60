"""Restart from before a gather: the replay gathers NEW children that join anew; the old ones are
canceled if they had not ended and count in no join; the steps before the restart point do not run
again; the join fires once per generation; and a restart cut off between its parts (the fault
injected at the SQL level) leaves a run that a plain retry resumes correctly.

Real workers in process; a child whose index is held goes to a queue nobody serves, where the test
moves it as a worker would (claims it, ends it), so "an old child still running" is a fact of the
database and not a race."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import asyncpg
import pytest

from dataloader import App, WorkflowFailed
from dataloader.workflows.derived import derived_job_id
from tests.conftest import wait_until
from tests.workflows import flows
from tests.workflows.conftest import probe_counts


@pytest.fixture(autouse=True)
def fresh_children() -> Iterator[None]:
    for flags in (flows.BROKEN_CHILDREN, flows.HELD_CHILDREN, flows.BROKEN_FINISH):
        flags.clear()
    yield
    for flags in (flows.BROKEN_CHILDREN, flows.HELD_CHILDREN, flows.BROKEN_FINISH):
        flags.clear()


async def _children(pool: asyncpg.Pool, run_id: uuid.UUID) -> list[asyncpg.Record]:
    return await pool.fetch(
        "SELECT c.run_id, c.parent_generation, c.joined, j.status::text AS status FROM dl_workflow_runs c "
        "JOIN dl_jobs j ON j.job_id = c.run_id WHERE c.parent_run_id = $1 ORDER BY c.parent_generation, c.run_id",
        run_id)


async def _gathers_done(pool: asyncpg.Pool, run_id: uuid.UUID) -> int:
    return await pool.fetchval("SELECT count(*) FROM dl_job_events WHERE job_id = $1 AND kind = 'workflow_gather' "
                               "AND payload->>'state' = 'done'", run_id)


async def _gather_pending(pool: asyncpg.Pool, run_id: uuid.UUID, remaining: int) -> bool:
    return await pool.fetchval("SELECT remaining FROM dl_workflow_steps WHERE run_id = $1 AND kind = 'gather' "
                               "AND state = 'pending'", run_id) == remaining


async def _status(pool: asyncpg.Pool, job_id: uuid.UUID) -> str:
    return await pool.fetchval("SELECT status::text FROM dl_jobs WHERE job_id = $1", job_id)


async def _hold_as_running(pool: asyncpg.Pool, job_id: uuid.UUID) -> None:
    """A worker that claimed the job and holds it (its lease far ahead: no reaper takes it back)."""
    await pool.execute("UPDATE dl_jobs SET status = 'running', attempt = 1, started_at = now(), "
                       "lease_expires_at = now() + interval '1 hour' WHERE job_id = $1 AND status = 'queued'", job_id)


async def _end(pool: asyncpg.Pool, job_id: uuid.UUID, status: str, result: object = None) -> None:
    """The job ends as a worker's finish ends it: one UPDATE of its status (the join's trigger counts it)."""
    await pool.execute("UPDATE dl_jobs SET status = $2::text::dl_status, finished_at = now(), result = $3::jsonb, "
                       "lease_expires_at = NULL, error = CASE WHEN $2 = 'succeeded' THEN NULL ELSE 'ended by the test' "
                       "END WHERE job_id = $1", job_id, status, result)


async def _wakes(pool: asyncpg.Pool, run_id: uuid.UUID) -> int:
    return await pool.fetchval("SELECT wakes FROM dl_workflow_runs WHERE run_id = $1", run_id)


async def test_a_restart_from_before_a_gather_gathers_new_children_and_runs_no_earlier_step_again(
        app: App, wdb: asyncpg.Pool, dsn: str) -> None:
    """3 children, one of which failed (the bug): fixed, the run restarts from `plan`; the replay
    gathers 3 new children, the old ones are counted in no join, `prepare` ran once."""
    flows.BROKEN_CHILDREN.add(1)
    async with app.running():
        run_id = await app.workflows.start("t.regather", {"dsn": dsn})
        with pytest.raises(WorkflowFailed, match="broken"):
            await app.workflows.result(run_id, timeout=30)
        old = await _children(wdb, run_id)
        assert sorted(c["status"] for c in old) == ["failed", "succeeded", "succeeded"]
        assert all(c["joined"] for c in old), "each old child was counted by the first join"
        flows.BROKEN_CHILDREN.clear()  # the fix is deployed
        restarted = await app.workflows.restart(run_id, from_step="plan")
        assert restarted.generation == 1
        assert await app.workflows.result(run_id, timeout=30) == {"results": [0, 10, 20]}
    children = await _children(wdb, run_id)
    new = [c for c in children if c["parent_generation"] == 1]
    assert len(children) == 6 and len(new) == 3
    assert {c["run_id"] for c in new} == {derived_job_id(run_id, 1, 3, i) for i in range(3)}
    assert not {c["run_id"] for c in new} & {c["run_id"] for c in old}, "the replay started new children"
    assert all(c["status"] == "succeeded" for c in new)
    # real executions: the steps before the restart point ran once, plan and the gather twice
    assert await probe_counts(wdb, run_id) == {"prepare": 1, "plan": 2}
    for c in children:
        assert await probe_counts(wdb, c["run_id"]) == {"work": 1}
    assert await _gathers_done(wdb, run_id) == 2, "the join fired once in each generation"
    run = await app.workflows.get(run_id)
    assert [(c.generation, c.seq) for c in run.earlier_children] == [(0, 3)] * 3
    assert sorted(c.status or "" for c in run.earlier_children) == ["failed", "succeeded", "succeeded"]
    assert {c.run_id for c in run.earlier_children} == {c["run_id"] for c in old}
    restart_row = await wdb.fetchval("SELECT payload FROM dl_job_events WHERE job_id = $1 "
                                     "AND kind = 'workflow_restart'", run_id)
    assert (restart_row["generation"], restart_row["gathers_removed"]) == (1, 1)


async def test_an_old_child_still_running_is_canceled_and_its_end_neither_wakes_nor_counts_in_the_new_join(
        app: App, wdb: asyncpg.Pool, dsn: str) -> None:
    """A fail-fast gather decided at child 1's failure while child 2 was still running (its worker
    holds it: the cancel is only asked). The run restarts from `plan`: the restart asks child 2 to
    stop again; the new join waits for its own three; child 2's end then changes nothing."""
    flows.HELD_CHILDREN.update({1, 2})
    async with app.running():
        run_id = await app.workflows.start("t.regather", {"dsn": dsn, "fail_fast": True})
        old_one, old_two = derived_job_id(run_id, 0, 3, 1), derived_job_id(run_id, 0, 3, 2)
        await wait_until(lambda: _gather_pending(wdb, run_id, 2), timeout=20, message="child 0 ended, 1 and 2 held")
        await _hold_as_running(wdb, old_two)
        await _end(wdb, old_one, "failed")  # fail fast: the run cancels child 2 and decides now
        with pytest.raises(WorkflowFailed, match="ended failed"):
            await app.workflows.result(run_id, timeout=30)
        assert await _status(wdb, old_two) == "running"  # asked to stop; its worker has not yet
        flows.HELD_CHILDREN.discard(1)  # the new children 0 and 1 run; the new 2 is held again
        await app.workflows.restart(run_id, from_step="plan")
        new_two = derived_job_id(run_id, 1, 3, 2)
        await wait_until(lambda: _gather_pending(wdb, run_id, 1), timeout=20, message="the new 0 and 1 ended")
        assert await wdb.fetchval("SELECT cancel_requested FROM dl_jobs WHERE job_id = $1", old_two)
        wakes = await _wakes(wdb, run_id)
        await _end(wdb, old_two, "canceled")  # the old child's worker stops at last
        assert await _gather_pending(wdb, run_id, 1), "the old child's end did not count in the new join"
        assert await _wakes(wdb, run_id) == wakes, "nor did it wake the run"
        await _end(wdb, new_two, "succeeded", 20)
        assert await app.workflows.result(run_id, timeout=30) == {"results": [0, 10, 20]}
    assert await _gathers_done(wdb, run_id) == 2
    assert await probe_counts(wdb, run_id) == {"prepare": 1, "plan": 2}


FAULT = """
CREATE OR REPLACE FUNCTION wf_test_fault() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN RAISE EXCEPTION 'injected fault: the restart is cut off here'; END $$;
DROP TRIGGER IF EXISTS wf_test_fault ON dl_jobs;
CREATE TRIGGER wf_test_fault BEFORE UPDATE ON dl_jobs FOR EACH ROW WHEN (OLD.job_id = '{job}'::uuid)
EXECUTE FUNCTION wf_test_fault();
"""


async def test_a_restart_cut_off_after_its_cut_is_resumed_by_a_plain_retry(
        app: App, wdb: asyncpg.Pool, dsn: str) -> None:
    """The restart's second part (cancelling the old children) fails at the SQL level: the cut is
    committed (a new generation, the history from `plan` on removed) and the run is still failed.
    A plain retry of its job resumes it correctly: the replay cancels the old child first, starts
    new children and joins them alone."""
    flows.HELD_CHILDREN.update({1, 2})
    async with app.running():
        run_id = await app.workflows.start("t.regather", {"dsn": dsn, "fail_fast": True})
        old_one, old_two = derived_job_id(run_id, 0, 3, 1), derived_job_id(run_id, 0, 3, 2)
        await wait_until(lambda: _gather_pending(wdb, run_id, 2), timeout=20, message="child 0 ended, 1 and 2 held")
        await _hold_as_running(wdb, old_two)
        await _end(wdb, old_one, "failed")
        with pytest.raises(WorkflowFailed):
            await app.workflows.result(run_id, timeout=30)
        await wdb.execute("UPDATE dl_jobs SET cancel_requested = false WHERE job_id = $1", old_two)
        flows.HELD_CHILDREN.clear()
        await wdb.execute(FAULT.format(job=old_two))
        try:
            with pytest.raises(asyncpg.RaiseError, match="injected fault"):
                await app.workflows.restart(run_id, from_step="plan")
        finally:
            await wdb.execute("DROP TRIGGER IF EXISTS wf_test_fault ON dl_jobs")
        # what the crash left: the cut, committed; the old child running, not asked to stop; the run failed
        run = await app.workflows.get(run_id)
        assert (run.status, run.generation, [s.name for s in run.steps]) == ("failed", 1, ["prepare"])
        assert await _status(wdb, old_two) == "running"
        assert not await wdb.fetchval("SELECT cancel_requested FROM dl_jobs WHERE job_id = $1", old_two)
        await app.retry(run_id)  # a plain retry (the console's job page, a bulk retry)
        assert await app.workflows.result(run_id, timeout=30) == {"results": [0, 10, 20]}
        assert await wdb.fetchval("SELECT cancel_requested FROM dl_jobs WHERE job_id = $1", old_two), \
            "the replay asked the old child to stop"
        await _end(wdb, old_two, "canceled")
    assert await _gathers_done(wdb, run_id) == 2
    assert await probe_counts(wdb, run_id) == {"prepare": 1, "plan": 2}
    assert [c["status"] for c in await _children(wdb, run_id) if c["parent_generation"] == 1] == ["succeeded"] * 3


async def test_a_second_restart_also_resumes_a_restart_cut_off_after_its_cut(
        app: App, wdb: asyncpg.Pool, dsn: str) -> None:
    """The other way out of the same cut-off restart: restarting again (from a step still recorded,
    or the start) finishes what the first began — a generation more, the old children canceled."""
    flows.BROKEN_CHILDREN.add(0)
    flows.HELD_CHILDREN.add(2)
    async with app.running():
        run_id = await app.workflows.start("t.regather", {"dsn": dsn, "fail_fast": True})
        held = derived_job_id(run_id, 0, 3, 2)
        await wait_until(lambda: _status(wdb, held), timeout=20, message="the held child")
        await _hold_as_running(wdb, held)
        with pytest.raises(WorkflowFailed):
            await app.workflows.result(run_id, timeout=30)
        await wdb.execute("UPDATE dl_jobs SET cancel_requested = false WHERE job_id = $1", held)
        flows.BROKEN_CHILDREN.clear()
        flows.HELD_CHILDREN.clear()
        await wdb.execute(FAULT.format(job=held))
        try:
            with pytest.raises(asyncpg.RaiseError):
                await app.workflows.restart(run_id, from_step="plan")
        finally:
            await wdb.execute("DROP TRIGGER IF EXISTS wf_test_fault ON dl_jobs")
        again = await app.workflows.restart(run_id, from_step="prepare")
        assert again.generation == 2
        assert await wdb.fetchval("SELECT cancel_requested FROM dl_jobs WHERE job_id = $1", held)
        assert await app.workflows.result(run_id, timeout=30) == {"results": [0, 10, 20]}
        await _end(wdb, held, "canceled")
    assert await probe_counts(wdb, run_id) == {"prepare": 2, "plan": 2}
    assert await _gathers_done(wdb, run_id) == 2  # generation 1 never reached its gather


async def test_a_restart_after_a_gather_keeps_its_children_the_runs_own(app: App, wdb: asyncpg.Pool, dsn: str) -> None:
    """A restart from a step after a gather keeps the gather (done: replayed from its record) and
    its children, which move to the new generation with the run: none is listed as an earlier
    generation's, none is canceled, none started again."""
    async with app.running():
        flows.BROKEN_FINISH.add("kept")
        run_id = await app.workflows.start("t.regather", {"dsn": dsn, "finish": "kept"})
        with pytest.raises(WorkflowFailed, match="finish is broken"):
            await app.workflows.result(run_id, timeout=30)
        flows.BROKEN_FINISH.clear()
        restarted = await app.workflows.restart(run_id, from_step="finish")
        assert restarted.generation == 1 and restarted.earlier_children == []
        assert await app.workflows.result(run_id, timeout=30) == {"results": [0, 10, 20], "finish": "finished"}
    children = await _children(wdb, run_id)
    assert [c["parent_generation"] for c in children] == [1, 1, 1]
    assert {c["run_id"] for c in children} == {derived_job_id(run_id, 0, 3, i) for i in range(3)}
    assert await _gathers_done(wdb, run_id) == 1


def _sync_restart(dsn: str, run_id: uuid.UUID) -> tuple[int, object]:
    from dataloader import SyncApp
    from tests.workflows.conftest import workflow_settings

    with SyncApp(workflow_settings(dsn, workers=[])) as sync:
        restarted = sync.workflows.restart(run_id, from_step="plan")
        return restarted.generation, sync.workflows.result(run_id, timeout=30)


async def test_sync_app_restarts_from_before_a_gather_too(app: App, wdb: asyncpg.Pool, dsn: str) -> None:
    """The blocking face makes the same call: it is allowed there too."""
    import asyncio

    flows.BROKEN_CHILDREN.add(2)
    async with app.running():  # the workers run on this loop; the SyncApp blocks in a thread
        run_id = await app.workflows.start("t.regather", {"dsn": dsn})
        with pytest.raises(WorkflowFailed):
            await app.workflows.result(run_id, timeout=30)
        flows.BROKEN_CHILDREN.clear()
        generation, result = await asyncio.to_thread(_sync_restart, dsn, run_id)
    assert (generation, result) == (1, {"results": [0, 10, 20]})
    assert await probe_counts(wdb, run_id) == {"prepare": 1, "plan": 2}


async def _failed_at_its_gather(app: App, dsn: str) -> uuid.UUID:
    flows.BROKEN_CHILDREN.add(0)
    run_id = await app.workflows.start("t.regather", {"dsn": dsn})
    with pytest.raises(WorkflowFailed):
        await app.workflows.result(run_id, timeout=30)
    flows.BROKEN_CHILDREN.clear()
    return run_id


async def test_http_and_the_cli_restart_from_before_a_gather_too(app: App, wdb: asyncpg.Pool, dsn: str,
                                                                cli_env: dict[str, str]) -> None:
    import asyncio
    import json

    import httpx

    from dataloader.api import create_app
    from tests.support.cli import run

    async with app.running(), httpx.AsyncClient(
            transport=httpx.ASGITransport(app=create_app(app.settings, context=app)), base_url="http://t") as client:
        over_http = await _failed_at_its_gather(app, dsn)
        answer = await client.post(f"/api/v1/workflows/{over_http}/restart", json={"from_step": "plan"})
        assert answer.status_code == 200 and answer.json()["generation"] == 1, answer.text
        assert await app.workflows.result(over_http, timeout=30) == {"results": [0, 10, 20]}
        shown = (await client.get(f"/api/v1/workflows/{over_http}")).json()
        assert [c["generation"] for c in shown["earlier_children"]] == [0, 0, 0]

        by_cli = await _failed_at_its_gather(app, dsn)
        env = {**cli_env, "DL_PIPELINE_MODULES": "tests.workflows.flows"}
        done = await asyncio.to_thread(run, ["workflows", "restart", str(by_cli), "--from-step", "plan"], env)
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout)["generation"] == 1
        assert await app.workflows.result(by_cli, timeout=30) == {"results": [0, 10, 20]}
    for run_id in (over_http, by_cli):
        assert await probe_counts(wdb, run_id) == {"prepare": 1, "plan": 2}
