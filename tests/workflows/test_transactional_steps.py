"""A step that writes to dataloader's database in the transaction that records it: the write and
the record commit together or not at all — exactly once, where a plain step is at least once."""

from __future__ import annotations

import logging
import signal

import asyncpg
import pytest

from dataloader import App
from dataloader.storage.workflow_repository import WorkflowRepository
from dataloader.workflows.context import Suspend, Workflow
from dataloader.workflows.testing import WorkflowTest
from tests.conftest import wait_until
from tests.workflows.conftest import probe_counts, workflow_settings
from tests.workflows.flows import QUEUE, TX_DDL

FAST = {"heartbeat_sec": 0.3, "reaper_period_sec": 0.5, "poll_fallback_sec": 1}


@pytest.fixture
async def txdb(wdb: asyncpg.Pool) -> asyncpg.Pool:
    await wdb.execute(TX_DDL)
    await wdb.execute("TRUNCATE wf_tx")
    return wdb


async def _rows(db: asyncpg.Pool, run_id) -> int:
    return await db.fetchval("SELECT count(*) FROM wf_tx WHERE run_id = $1", str(run_id))


async def test_the_write_commits_with_the_record(app: App, dsn: str, txdb: asyncpg.Pool):
    async with app.running():
        run_id = await app.workflows.start("t.tx", {"dsn": dsn})
        assert await app.workflows.result(run_id, timeout=30) == {"rows_seen_in_step": 1}
    assert await _rows(txdb, run_id) == 1
    assert (await app.workflows.get(run_id)).steps[0].result == 1


async def test_a_failed_attempt_rolls_its_write_back_and_the_retry_writes_once(app: App, dsn: str,
                                                                                 txdb: asyncpg.Pool):
    async with app.running():
        run_id = await app.workflows.start("t.tx", {"dsn": dsn, "fail_first": True})
        assert await app.workflows.result(run_id, timeout=30) == {"rows_seen_in_step": 1}
    assert await probe_counts(txdb, run_id) == {"tx": 2} and await _rows(txdb, run_id) == 1


@pytest.mark.timeout(120)
@pytest.mark.process
async def test_kill_9_inside_the_transaction_leaves_no_write_and_the_step_runs_again_once(
        dsn, txdb, workers, subprocess_env):
    subprocess_env["DL_PIPELINE_MODULES"] = "tests.workflows.flows"
    async with App(workflow_settings(dsn)) as app:
        run_id = await app.workflows.start("t.tx", {"dsn": dsn, "pause": 60}, lease_ttl_sec=2)
        victim = workers(queues={QUEUE: 2}, **FAST)
        await victim.wait_ready()
        await wait_until(lambda: probe_counts(txdb, run_id), timeout=30, message="the step to start")
        victim.signal(signal.SIGKILL)
        assert await victim.wait_exit() == -signal.SIGKILL
        assert await _rows(txdb, run_id) == 0  # the killed transaction's write is gone with it
        rescuer = workers(queues={QUEUE: 2}, **FAST)
        await rescuer.wait_ready()
        assert await app.workflows.result(run_id, timeout=60) == {"rows_seen_in_step": 1}
    assert await probe_counts(txdb, run_id) == {"tx": 2} and await _rows(txdb, run_id) == 1


async def test_an_attempt_that_lost_its_job_writes_nothing(app: App, dsn: str, txdb: asyncpg.Pool):
    run_id = await app.workflows.start("t.steps", {"dsn": dsn})
    await txdb.execute("UPDATE dl_jobs SET status = 'running', attempt = 2, lease_expires_at = now() + interval '1 m' "
                       "WHERE job_id = $1", run_id)
    repo = WorkflowRepository(txdb)
    history = await repo.history(run_id, 1)
    stale = Workflow(run_id=run_id, workflow="t.steps", input={}, attempt=1, history=history, repo=repo,
                     queue_of=lambda name: None, lease_ttl_sec=60, log=logging.getLogger("test"))
    stale._lease_known_until = float("inf")  # it believes it holds the run: the record's fence decides

    async def write(conn: asyncpg.Connection) -> int:
        await conn.execute("INSERT INTO wf_tx (run_id, n) VALUES ($1, 1)", str(run_id))
        return 1

    with pytest.raises(Suspend):
        await stale.step("write", write, transaction=True)
    assert await _rows(txdb, run_id) == 0
    assert await txdb.fetchval("SELECT count(*) FROM dl_workflow_steps WHERE run_id = $1", run_id) == 0


async def test_only_an_async_function_and_only_against_a_database(dsn: str, txdb: asyncpg.Pool, app: App):
    run_id = await app.workflows.start("t.steps", {"dsn": dsn})
    history = await WorkflowRepository(txdb).history(run_id, 1)
    wf = Workflow(run_id=run_id, workflow="t.steps", input={}, attempt=1, history=history,
                  repo=WorkflowRepository(txdb), queue_of=lambda name: None, lease_ttl_sec=60,
                  log=logging.getLogger("test"))
    with pytest.raises(TypeError, match="async function"):
        await wf.step("write", lambda conn: 1, transaction=True)
    run = await WorkflowTest.start("t.tx", {"dsn": dsn})
    assert run.status == "failed" and "step 'write' failed" in (run.error or "") and "no database" in run.error
