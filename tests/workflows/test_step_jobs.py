"""Steps with job options of their own (`wf.step(..., queue=..., lock_key=...)`) run as jobs of their
own, on their queue's workers, under its lock and limits, joined by their run (docs/workflows.md
"Steps as jobs of their own"). Against a real PostgreSQL; real `dataloader worker` processes where
the queue, the lock or a kill -9 is what is proved. `wf_probe` (outside the engine) counts every real
execution of a step function and the process that ran it."""

from __future__ import annotations

import itertools
import json
import signal
import uuid
from typing import Any

import asyncpg
import pytest

from dataloader import App, Queue, ValidationFailed
from dataloader.workflows.testing import WorkflowTest
from tests.conftest import wait_until
from tests.workflows.conftest import probe_counts, workflow_settings
from tests.workflows.step_flows import QUEUE, RENAMED, SPANS_DDL, STEP_QUEUE

FAST = {"heartbeat_sec": 0.3, "reaper_period_sec": 0.5, "poll_fallback_sec": 1}
MODULES = "tests.workflows.step_flows"


@pytest.fixture
async def sdb(wdb: asyncpg.Pool) -> asyncpg.Pool:
    await wdb.execute(SPANS_DDL)
    await wdb.execute("TRUNCATE wf_spans")
    await wdb.execute("DELETE FROM dl_queue_flow WHERE queue = $1", STEP_QUEUE)
    return wdb


def run_queue_only(dsn: str, **overrides: object):
    """An App whose own workers serve the runs' queue only: a step job waits for another node."""
    return App(workflow_settings(dsn, workers=[Queue(QUEUE, 4)], **overrides))


async def _step_row(pool: asyncpg.Pool, run_id: uuid.UUID, seq: int = 1) -> asyncpg.Record | None:
    return await pool.fetchrow("SELECT * FROM dl_workflow_steps WHERE run_id = $1 AND seq = $2", run_id, seq)


async def _step_job(pool: asyncpg.Pool, run_id: uuid.UUID, seq: int = 1) -> asyncpg.Record | None:
    return await pool.fetchrow("SELECT j.* FROM dl_workflow_steps s JOIN dl_jobs j ON j.job_id = s.job_id "
                               "WHERE s.run_id = $1 AND s.seq = $2", run_id, seq)


async def _probe_pids(pool: asyncpg.Pool, run_id: uuid.UUID, step: str) -> list[asyncpg.Record]:
    return await pool.fetch("SELECT pid, step_key FROM wf_probe WHERE run_id = $1 AND step = $2 ORDER BY id",
                            str(run_id), step)


@pytest.mark.timeout(120)
async def test_a_step_with_a_queue_runs_on_that_queues_worker_and_the_run_resumes_with_its_result(
        dsn, sdb, workers, subprocess_env) -> None:
    subprocess_env["DL_PIPELINE_MODULES"] = MODULES
    async with run_queue_only(dsn) as app, app.running():
        run_id = await app.workflows.start("t.sj.charge", {"dsn": dsn, "amount": 30, "account": "a1"})
        # the run records the step pending with its job and suspends: no node serves `pay` yet
        await wait_until(lambda: _step_job(sdb, run_id), timeout=20, message="the step job to be enqueued")
        job = await _step_job(sdb, run_id)
        assert (job["queue"], job["lock_key"], job["task"]) == (STEP_QUEUE, "acct:a1", "workflow-step:t.sj.charge")
        await wait_until(lambda: _run_status_is(sdb, run_id, "queued"), timeout=20, message="the run to suspend")
        assert await probe_counts(sdb, run_id) == {}
        payer = workers(queues={STEP_QUEUE: 2}, **FAST)  # a node that serves only the step's queue
        await payer.wait_ready()
        result = await app.workflows.result(run_id, timeout=60)
    assert result["charged"]["charged"] == 30 and result["charged"]["pid"] == payer.pid
    assert result["charged"]["key"] == f"{run_id}:1"  # the step's key, as inside its run's job
    assert result["after"] == 1
    assert await probe_counts(sdb, run_id) == {"charge": 1, "after": 1}
    assert [r["pid"] for r in await _probe_pids(sdb, run_id, "charge")] == [payer.pid]
    row = await _step_row(sdb, run_id)
    assert row["state"] == "done" and row["remaining"] == 0 and row["attempts"] == 1
    assert (await app_status(dsn, row["job_id"])) == "succeeded"
    # every face shows the step's job, its queue and lock_key
    async with run_queue_only(dsn) as app:
        run = await app.workflows.get(run_id)
    step = run.steps[0]
    assert (step.job_id, step.job_queue, step.job_lock_key, step.job_status) == (
        row["job_id"], STEP_QUEUE, "acct:a1", "succeeded")
    assert step.to_dict()["job_id"] == str(row["job_id"])
    assert run.steps[1].job_id is None  # a step without job options stays in the run's job


async def app_status(dsn: str, job_id: uuid.UUID) -> str:
    conn = await asyncpg.connect(dsn)
    try:
        return await conn.fetchval("SELECT status::text FROM dl_jobs WHERE job_id = $1", job_id)
    finally:
        await conn.close()


async def _run_status_is(pool: asyncpg.Pool, run_id: uuid.UUID, status: str) -> bool:
    return await pool.fetchval("SELECT status::text FROM dl_jobs WHERE job_id = $1", run_id) == status


async def test_bad_job_options_fail_the_run_at_the_step_with_the_enqueue_s_error(sdb, dsn) -> None:
    """The options are checked by the enqueue's own model: a blank queue, an over-long lock_key, a
    priority out of range fail the step's call (ValidationFailed), and nothing is enqueued."""
    from dataloader import workflow

    @workflow("t.sj.bad", queue=QUEUE)
    async def bad(wf, input):
        try:
            await wf.step("x", _never, **input)
        except ValidationFailed as exc:
            return {"refused": str(exc)}
        return {"refused": None}

    async with run_queue_only(dsn) as app, app.running():
        for options, needle in (({"queue": " "}, "queue"), ({"lock_key": "k" * 513}, "lock_key"),
                                ({"priority": -1}, "priority"), ({"lease_ttl_sec": 0}, "lease_ttl_sec")):
            run_id = await app.workflows.start("t.sj.bad", options)
            refused = (await app.workflows.result(run_id, timeout=20))["refused"]
            assert refused is not None and needle in refused, (options, refused)
            assert await sdb.fetchval("SELECT count(*) FROM dl_workflow_steps WHERE run_id = $1", run_id) == 0
        assert await sdb.fetchval("SELECT count(*) FROM dl_jobs WHERE task = 'workflow-step:t.sj.bad'") == 0
    # the in-memory harness refuses the same options the same way
    run = await WorkflowTest.start("t.sj.bad", {"lock_key": "k" * 513})
    assert run.status == "succeeded" and "lock_key" in run.result["refused"]


async def _never() -> None:
    raise AssertionError("a step with bad options must not run")


@pytest.mark.timeout(180)
async def test_steps_sharing_a_lock_key_never_overlap_and_a_step_queue_limit_of_one_holds(
        dsn, sdb, workers, subprocess_env) -> None:
    """Two worker processes serve the step queue with room for 4 each. Runs whose steps share a
    lock_key never run those steps at once; neither do steps of a queue limited to 1 at a time,
    with no lock_key in common. Checked from the steps' own start and end times (the database's
    clock) written by the step functions."""
    subprocess_env["DL_PIPELINE_MODULES"] = MODULES
    async with run_queue_only(dsn) as app, app.running():
        nodes = [workers(queues={STEP_QUEUE: 4}, **FAST) for _ in range(2)]
        for node in nodes:
            await node.wait_ready()
        locked = [await app.workflows.start("t.sj.locked", {"dsn": dsn, "hold": 0.3, "lock_key": "acct:shared"})
                  for _ in range(4)]
        for run_id in locked:
            await app.workflows.result(run_id, timeout=90)
        await _assert_no_overlap(sdb, locked)
        await app.configure_queue(STEP_QUEUE, concurrency=1)
        limited = [await app.workflows.start("t.sj.locked", {"dsn": dsn, "hold": 0.3}) for _ in range(4)]
        pids = {await app.workflows.result(run_id, timeout=90) for run_id in limited}
        await _assert_no_overlap(sdb, limited)
    assert pids <= {n.pid for n in nodes}


async def _assert_no_overlap(pool: asyncpg.Pool, run_ids: list[uuid.UUID]) -> None:
    spans = await pool.fetch("SELECT run_id, started, ended FROM wf_spans WHERE run_id = ANY($1::text[]) "
                             "ORDER BY started", [str(r) for r in run_ids])
    assert len(spans) == len(run_ids)
    for earlier, later in itertools.pairwise(spans):
        assert earlier["ended"] <= later["started"], f"steps overlapped: {earlier} and {later}"


@pytest.mark.timeout(120)
async def test_a_paused_step_queue_holds_the_step_and_the_run_holds_no_worker(dsn, sdb) -> None:
    async with App(workflow_settings(dsn, workers=[Queue(QUEUE, 2), Queue(STEP_QUEUE, 2)])) as app:
        await app.pause_queue(STEP_QUEUE)
        async with app.running():
            run_id = await app.workflows.start("t.sj.charge", {"dsn": dsn, "amount": 5, "account": "p"})
            await wait_until(lambda: _step_job(sdb, run_id), timeout=20, message="the step job to be enqueued")
            await wait_until(lambda: _run_status_is(sdb, run_id, "queued"), timeout=20, message="the run to suspend")
            # the node works: a run on the runs' queue starts and ends meanwhile
            other = await app.workflows.start("t.steps", {"dsn": dsn})
            await app.workflows.result(other, timeout=20)
            job = await _step_job(sdb, run_id)
            assert job["status"] == "queued" and job["attempt"] == 0
            assert await _run_status_is(sdb, run_id, "queued")  # suspended: no worker held
            running = await sdb.fetchval("SELECT count(*) FROM dl_jobs WHERE status = 'running' AND job_id = ANY($1)",
                                         [run_id, job["job_id"]])
            assert running == 0
            assert await probe_counts(sdb, run_id) == {}
            await app.resume_queue(STEP_QUEUE)
            result = await app.workflows.result(run_id, timeout=30)
    assert result["charged"]["charged"] == 5
    assert await probe_counts(sdb, run_id) == {"charge": 1, "after": 1}


@pytest.mark.timeout(120)
async def test_a_step_job_retries_with_its_backoff_and_its_final_failure_is_the_runs_step_failed(
        dsn, sdb) -> None:
    async with App(workflow_settings(dsn, workers=[Queue(QUEUE, 2), Queue(STEP_QUEUE, 2)])) as app, app.running():
        recovers = await app.workflows.start("t.sj.flaky", {"dsn": dsn, "failures": 2, "attempts": 3})
        assert await app.workflows.result(recovers, timeout=30) == {"value": 3}
        gives_up = await app.workflows.start("t.sj.flaky", {"dsn": dsn, "failures": 9, "attempts": 2})
        assert await app.workflows.result(gives_up, timeout=30) == {
            "failed": "RuntimeError: flaky failure 2", "name": "flaky"}
    assert await probe_counts(sdb, recovers) == {"flaky": 3}
    assert await probe_counts(sdb, gives_up) == {"flaky": 2}
    job = await _step_job(sdb, recovers)
    assert job["status"] == "succeeded" and job["attempt"] == 3  # its own attempts: the job's
    retries = await sdb.fetch("SELECT payload FROM dl_job_events WHERE job_id = $1 AND kind = 'requeue' "
                              "ORDER BY event_id", job["job_id"])
    assert len(retries) == 2
    # the engine's retry, after the step's backoff (0.2 s, then 0.4 s): the probe's times show it
    times = await sdb.fetch("SELECT at FROM wf_probe WHERE run_id = $1 ORDER BY id", str(recovers))
    gaps = [(b["at"] - a["at"]).total_seconds() for a, b in itertools.pairwise(times)]
    assert gaps[0] >= 0.2 and gaps[1] >= 0.4, gaps
    failed_job = await _step_job(sdb, gives_up)
    assert failed_job["status"] == "failed" and failed_job["attempt"] == 2
    row = await _step_row(sdb, gives_up)
    assert row["state"] == "failed" and row["error"] == "RuntimeError: flaky failure 2" and row["attempts"] == 2


@pytest.mark.timeout(150)
async def test_kill_9_before_the_step_jobs_record_runs_it_again_with_its_key_and_never_after(
        dsn, sdb, workers, subprocess_env) -> None:
    subprocess_env["DL_PIPELINE_MODULES"] = MODULES
    async with run_queue_only(dsn) as app, app.running():
        run_id = await app.workflows.start("t.sj.charge", {"dsn": dsn, "amount": 7, "account": "k", "pause": 60},
                                           lease_ttl_sec=2)
        victim = workers(queues={STEP_QUEUE: 2}, **FAST)
        await victim.wait_ready()
        await wait_until(lambda: _ran(sdb, run_id, "charge", 1), timeout=30, message="the step job's step to start")
        victim.signal(signal.SIGKILL)
        assert await victim.wait_exit() == -signal.SIGKILL
        rescuer = workers(queues={STEP_QUEUE: 2}, **FAST)
        await rescuer.wait_ready()
        result = await app.workflows.result(run_id, timeout=60)
        assert result["charged"]["count"] == 2
        runs = await _probe_pids(sdb, run_id, "charge")
        assert [r["pid"] for r in runs] == [victim.pid, rescuer.pid]
        assert [r["step_key"] for r in runs] == [f"{run_id}:1", f"{run_id}:1"]  # the same key both times
        job = await _step_job(sdb, run_id)
        assert job["status"] == "succeeded" and job["attempt"] == 2
        # after its record, never again: a step job that ended failed after it recorded (as when its
        # finish was cut off and its attempts ran out), retried by an operator, finds the record and runs nothing
        await sdb.execute("UPDATE dl_jobs SET status = 'failed', finished_at = now() WHERE job_id = $1", job["job_id"])
        await app.retry(job["job_id"])
        await wait_until(lambda: _done_twice(sdb, job["job_id"]), timeout=30, message="the retried step job to end")
    assert await probe_counts(sdb, run_id) == {"charge": 2, "after": 1}


@pytest.mark.timeout(150)
async def test_kill_9_of_the_run_after_its_step_job_recorded_never_runs_that_step_again(
        dsn, sdb, workers, subprocess_env) -> None:
    """The step job recorded its step; the node running the run's next step is killed: the run is
    replayed elsewhere and the step job's step returns its recorded result without running."""
    subprocess_env["DL_PIPELINE_MODULES"] = MODULES
    async with App(workflow_settings(dsn, workers=[Queue(STEP_QUEUE, 2)])) as app, app.running():
        run_id = await app.workflows.start("t.sj.charge", {"dsn": dsn, "amount": 9, "account": "r",
                                                           "pause_after": 60}, lease_ttl_sec=2)
        victim = workers(queues={QUEUE: 2}, **FAST)
        await victim.wait_ready()
        await wait_until(lambda: _ran(sdb, run_id, "after", 1), timeout=30, message="the step after to start")
        assert (await _step_row(sdb, run_id))["state"] == "done"
        victim.signal(signal.SIGKILL)
        assert await victim.wait_exit() == -signal.SIGKILL
        rescuer = workers(queues={QUEUE: 2}, **FAST)
        await rescuer.wait_ready()
        result = await app.workflows.result(run_id, timeout=60)
    assert result["charged"]["count"] == 1 and result["after"] == 2
    assert await probe_counts(sdb, run_id) == {"charge": 1, "after": 2}


async def _ran(pool: asyncpg.Pool, run_id: uuid.UUID, step: str, n: int) -> bool:
    return await pool.fetchval("SELECT count(*) FROM wf_probe WHERE run_id = $1 AND step = $2",
                               str(run_id), step) >= n


async def _done_twice(pool: asyncpg.Pool, job_id: uuid.UUID) -> bool:
    return await pool.fetchval("SELECT count(*) FROM dl_job_events WHERE job_id = $1 AND kind = 'done'", job_id) >= 2


async def _job_status_is(pool: asyncpg.Pool, job_id: uuid.UUID, status: str, attempt: int) -> bool:
    row = await pool.fetchrow("SELECT status::text AS status, attempt FROM dl_jobs WHERE job_id = $1", job_id)
    return row is not None and row["status"] == status and row["attempt"] == attempt


@pytest.mark.timeout(120)
async def test_a_step_job_whose_code_no_longer_reaches_its_step_fails_with_history_mismatch(dsn, sdb) -> None:
    async with run_queue_only(dsn) as app, app.running():
        run_id = await app.workflows.start("t.sj.charge", {"dsn": dsn, "amount": 1, "account": "m"})
        await wait_until(lambda: _step_job(sdb, run_id), timeout=20, message="the step job to be enqueued")
        await wait_until(lambda: _run_status_is(sdb, run_id, "queued"), timeout=20, message="the run to suspend")
        RENAMED["charge"] = "refund"  # a deploy: position 1 now holds another step
        try:
            async with App(workflow_settings(dsn, workers=[Queue(STEP_QUEUE, 2)])) as payer, payer.running():
                job = await _step_job(sdb, run_id)
                await wait_until(lambda: _job_status_is(sdb, job["job_id"], "failed", attempt=1), timeout=30,
                                 message="the step job to fail")
                run = None
                for _ in range(2):
                    try:
                        await app.workflows.result(run_id, timeout=30)
                    except Exception:
                        run = await app.workflows.get(run_id)
                        break
        finally:
            RENAMED["charge"] = "charge"
    failed = await sdb.fetchrow("SELECT error FROM dl_jobs WHERE job_id = $1", job["job_id"])
    assert "position 1" in failed["error"] and "'charge'" in failed["error"] and "'refund'" in failed["error"]
    assert run is not None and run.status == "failed"
    assert "recorded step 'charge' but the code now asks for step 'refund'" in run.error
    assert await probe_counts(sdb, run_id) == {}  # neither name ran


async def test_workflow_test_runs_steps_with_job_options_inline_with_their_retries_on_its_clock() -> None:
    from datetime import UTC, datetime

    from tests.workflows.step_flows import FAILURES_LEFT

    FAILURES_LEFT["t1"] = 1
    run = await WorkflowTest.start("t.sj.inline", {"run": "t1"}, now=datetime(2026, 1, 1, tzinfo=UTC))
    assert run.status == "waiting" and run.step_runs["charge"] == 1  # failed once; its backoff is 10 s
    await run.advance(seconds=10)
    assert run.status == "succeeded" and run.result == "charged" and run.step_runs["charge"] == 2
    assert run.steps[1].job_id is None  # inline: the harness has no queues or workers


async def test_a_step_jobs_attempts_are_spans_of_its_runs_trace_and_its_step_is_counted(dsn, sdb, spans) -> None:
    from tests.workflows.test_observability import sample

    succeeded = sample("dl_workflow_steps_total", workflow="t.sj.flaky", outcome="succeeded")
    retried = sample("dl_workflow_steps_total", workflow="t.sj.flaky", outcome="retried")
    waits = sample("dl_workflow_suspends_total", workflow="t.sj.flaky", reason="step_job")
    async with App(workflow_settings(dsn, workers=[Queue(QUEUE, 2), Queue(STEP_QUEUE, 2)])) as app, app.running():
        run_id = await app.workflows.start("t.sj.flaky", {"dsn": dsn, "failures": 1, "attempts": 2})
        assert await app.workflows.result(run_id, timeout=30) == {"value": 2}
    assert sample("dl_workflow_steps_total", workflow="t.sj.flaky", outcome="succeeded") - succeeded == 1
    assert sample("dl_workflow_steps_total", workflow="t.sj.flaky", outcome="retried") - retried == 1
    assert sample("dl_workflow_suspends_total", workflow="t.sj.flaky", reason="step_job") - waits == 1
    job_id = (await _step_row(sdb, run_id))["job_id"]
    finished = spans.get_finished_spans()
    start = next(s for s in finished if s.name == "workflow start t.sj.flaky"
                 and s.attributes["messaging.message.id"] == str(run_id))
    step_attempts = [s for s in finished if s.name == f"process {STEP_QUEUE}"
                     and s.attributes.get("messaging.message.id") == str(job_id)]
    assert len(step_attempts) == 2  # one failed, one succeeded: both in the run's trace
    assert {s.context.trace_id for s in step_attempts} == {start.context.trace_id}
    steps = [s for s in finished if s.name == "step flaky" and s.context.trace_id == start.context.trace_id]
    in_trace = {s.context.span_id: s for s in finished if s.context.trace_id == start.context.trace_id}
    attempt_ids = {s.context.span_id for s in step_attempts}

    def attempt_of(span: Any) -> int:
        while span.context.span_id not in attempt_ids and span.parent is not None:
            span = in_trace[span.parent.span_id]
        assert span.context.span_id in attempt_ids, span.name
        return span.context.span_id

    assert len(steps) == 2 and {attempt_of(s) for s in steps} == attempt_ids  # each inside its step job's attempt


async def test_cancelling_a_run_cancels_its_waiting_step_job(dsn, sdb) -> None:
    async with run_queue_only(dsn) as app, app.running():
        run_id = await app.workflows.start("t.sj.charge", {"dsn": dsn, "amount": 2, "account": "c"})
        await wait_until(lambda: _step_job(sdb, run_id), timeout=20, message="the step job to be enqueued")
        await wait_until(lambda: _run_status_is(sdb, run_id, "queued"), timeout=20, message="the run to suspend")
        assert (await app.workflows.cancel(run_id)).status == "canceled"
    job = await _step_job(sdb, run_id)
    assert job["status"] == "canceled"
    assert (await _step_row(sdb, run_id))["remaining"] == 0  # its end was counted, once
    assert await probe_counts(sdb, run_id) == {}


async def test_a_plain_def_workflow_runs_its_step_as_a_job_too(dsn, sdb) -> None:
    async with App(workflow_settings(dsn, workers=[Queue(QUEUE, 2), Queue(STEP_QUEUE, 2)])) as app, app.running():
        run_id = await app.workflows.start("t.sj.sync", {"n": 20})
        assert await app.workflows.result(run_id, timeout=30) == {"first": 21, "doubled": 42}
    job = await _step_job(sdb, run_id, seq=2)
    assert (job["queue"], job["lock_key"], job["status"]) == (STEP_QUEUE, "sync", "succeeded")
    assert (await _step_row(sdb, run_id, seq=1))["job_id"] is None


async def test_a_step_job_deleted_unfinished_is_counted_and_the_step_fails(dsn, sdb) -> None:
    """The one end that is no UPDATE of status (a DELETE of the queued row, by hand): 0036's delete
    trigger counts it, wakes the run, and the run records the step failed with how its job ended."""
    async with run_queue_only(dsn) as app, app.running():
        run_id = await app.workflows.start("t.sj.charge", {"dsn": dsn, "amount": 4, "account": "d"})
        await wait_until(lambda: _step_job(sdb, run_id), timeout=20, message="the step job to be enqueued")
        await wait_until(lambda: _run_status_is(sdb, run_id, "queued"), timeout=20, message="the run to suspend")
        job_id = (await _step_row(sdb, run_id))["job_id"]
        await sdb.execute("DELETE FROM dl_jobs WHERE job_id = $1", job_id)
        await wait_until(lambda: _run_status_is(sdb, run_id, "failed"), timeout=20, message="the run to fail")
        run = await app.workflows.get(run_id)
    assert f"its step job {job_id} ended deleted" in run.error and "step 'charge' failed" in run.error
    row = await _step_row(sdb, run_id)
    assert (row["state"], row["remaining"]) == ("failed", 0)
    assert await probe_counts(sdb, run_id) == {}


async def test_http_and_cli_show_a_step_jobs_position_with_its_job_queue_and_lock_key(dsn, sdb, cli_env) -> None:
    import httpx

    from dataloader.api import create_app
    from tests.support.cli import run

    async with App(workflow_settings(dsn, workers=[Queue(QUEUE, 2), Queue(STEP_QUEUE, 2)])) as app, app.running():
        run_id = await app.workflows.start("t.sj.charge", {"dsn": dsn, "amount": 6, "account": "h"})
        await app.workflows.result(run_id, timeout=30)
        job_id = str((await _step_row(sdb, run_id))["job_id"])
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=create_app(app.settings, context=app)),
                                     base_url="http://t") as client:
            got = (await client.get(f"/api/v1/workflows/{run_id}")).json()
    shown = {k: got["steps"][0][k] for k in ("job_id", "job_queue", "job_lock_key", "job_status")}
    assert shown == {"job_id": job_id, "job_queue": STEP_QUEUE, "job_lock_key": "acct:h", "job_status": "succeeded"}
    assert got["steps"][1]["job_id"] is None
    cli = run(["workflows", "get", str(run_id)], {**cli_env, "DL_PIPELINE_MODULES": MODULES})
    assert cli.returncode == 0, cli.stderr
    step = json.loads(cli.stdout)["steps"][0]
    assert (step["job_id"], step["job_queue"], step["job_lock_key"]) == (job_id, STEP_QUEUE, "acct:h")


async def test_steps_side_by_side_mix_inline_steps_and_step_jobs(dsn, sdb) -> None:
    async with App(workflow_settings(dsn, workers=[Queue(QUEUE, 2), Queue(STEP_QUEUE, 2)])) as app, app.running():
        run_id = await app.workflows.start("t.sj.side_by_side", {"dsn": dsn})
        assert await app.workflows.result(run_id, timeout=30) == [1, 1, 1]
    assert await probe_counts(sdb, run_id) == {"inline": 1, "away-1": 1, "away-2": 1}
    rows = await sdb.fetch("SELECT seq, name, state, job_id IS NOT NULL AS as_job FROM dl_workflow_steps "
                           "WHERE run_id = $1 ORDER BY seq", run_id)
    assert [(r["seq"], r["name"], r["state"], r["as_job"]) for r in rows] == [
        (1, "inline", "done", False), (2, "away-1", "done", True), (3, "away-2", "done", True)]
