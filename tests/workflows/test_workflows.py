"""Steps, sleeps, signals and joins against a real PostgreSQL, with the engine in this process."""

from __future__ import annotations

import asyncio
import time
import uuid

import asyncpg
import pytest

from dataloader import App, ValidationFailed, WorkflowFailed, WorkflowFinished, WorkflowNotFound
from dataloader.workflows import workflows
from tests.conftest import wait_until
from tests.workflows.conftest import probe_counts
from tests.workflows.flows import QUEUE


async def test_steps_run_once_and_the_result_is_the_run_result(app: App, wdb: asyncpg.Pool, dsn: str) -> None:
    async with app.running():
        run_id = await app.workflows.start("t.steps", {"dsn": dsn})
        assert await app.workflows.result(run_id, timeout=20) == {"one": 1, "two": 1, "three": 1}
    run = await app.workflows.get(run_id)
    assert run.status == "succeeded" and run.workflow == "t.steps" and run.queue == QUEUE
    assert [(s.seq, s.kind, s.name, s.state, s.result) for s in run.steps] == [
        (1, "step", "one", "done", 1), (2, "step", "two", "done", 1), (3, "step", "three", "done", 1)]
    assert await probe_counts(wdb, run_id) == {"one": 1, "two": 1, "three": 1}
    # the run IS a job; each record has its journal row, written with it
    job = await app.get(run_id)
    assert job.task == "workflow:t.steps"
    kinds = [e.kind for e in await app.events(run_id)]
    assert kinds.count("workflow_step") == 3
    keys = await wdb.fetch("SELECT step, step_key FROM wf_probe WHERE run_id = $1 ORDER BY id", str(run_id))
    assert [r["step_key"] for r in keys] == [f"{run_id}:1", f"{run_id}:2", f"{run_id}:3"]


async def test_a_replay_returns_recorded_results_without_running_them(app: App, wdb: asyncpg.Pool, dsn: str
                                                                     ) -> None:
    """A run whose first two steps are recorded (as after a crash) runs only the third."""
    async with app.running():
        run_id = await app.workflows.start("t.steps", {"dsn": dsn})
        await app.workflows.result(run_id, timeout=20)
    # fake the history of a run cut off after step two: a new run with two recorded positions
    replay = await app.workflows.start("t.steps", {"dsn": dsn})
    await wdb.execute("""INSERT INTO dl_workflow_steps (run_id, seq, kind, name, state, result)
                         VALUES ($1, 1, 'step', 'one', 'done', '41'), ($1, 2, 'step', 'two', 'done', '42')""", replay)
    async with app.running():
        assert await app.workflows.result(replay, timeout=20) == {"one": 41, "two": 42, "three": 1}
    assert await probe_counts(wdb, replay) == {"three": 1}


async def test_durable_sleep_holds_no_worker_and_wakes_on_time(app: App, wdb: asyncpg.Pool, dsn: str) -> None:
    async with app.running():
        started = time.monotonic()
        run_id = await app.workflows.start("t.sleep", {"dsn": dsn, "seconds": 1.5})
        await wait_until(lambda: _asleep(wdb, run_id), timeout=10, message="the run sleeps in the queue")
        job = await app.get(run_id)
        assert job.status == "queued" and job.attempt == 0  # handed back without using an attempt
        assert await app.workflows.result(run_id, timeout=20) == {"before": 1, "after": 1}
        elapsed = time.monotonic() - started
    assert 1.5 <= elapsed < 8, elapsed  # woken on time (bounded for a loaded CI machine), never early
    run = await app.workflows.get(run_id)
    assert [s.kind for s in run.steps] == ["step", "sleep", "step"]
    assert await probe_counts(wdb, run_id) == {"before": 1, "after": 1}


async def _asleep(pool: asyncpg.Pool, run_id: uuid.UUID) -> bool:
    return bool(await pool.fetchval(
        """SELECT EXISTS (SELECT 1 FROM dl_workflow_steps s JOIN dl_jobs j ON j.job_id = s.run_id
                          WHERE s.run_id = $1 AND s.kind = 'sleep' AND j.status = 'queued')""", run_id))


async def _status(pool: asyncpg.Pool, run_id: uuid.UUID, status: str) -> bool:
    return await pool.fetchval("SELECT status::text FROM dl_jobs WHERE job_id = $1", run_id) == status


async def test_a_signal_sent_during_the_wait_wakes_the_run(app: App, wdb: asyncpg.Pool, dsn: str) -> None:
    async with app.running():
        run_id = await app.workflows.start("t.wait", {"dsn": dsn, "timeout": 60})
        await wait_until(lambda: _waiting(wdb, run_id), timeout=10, message="the run waits")
        sent = time.monotonic()
        await app.signal_workflow(run_id, "go", {"paid": 100})
        assert await app.workflows.result(run_id, timeout=20) == {"first": {"paid": 100}, "second": None}
        assert time.monotonic() - sent < 15  # woken by the signal, not by the 60 s deadline


async def _waiting(pool: asyncpg.Pool, run_id: uuid.UUID) -> bool:
    return bool(await pool.fetchval(
        """SELECT EXISTS (SELECT 1 FROM dl_workflow_steps s JOIN dl_jobs j ON j.job_id = s.run_id
                          WHERE s.run_id = $1 AND s.kind = 'wait' AND s.state = 'pending' AND j.status = 'queued')""",
        run_id))


async def test_signals_sent_before_the_wait_are_stored_and_each_answers_one_wait(
        app: App, wdb: asyncpg.Pool, dsn: str) -> None:
    run_id = await app.workflows.start("t.wait", {"dsn": dsn, "timeout": 60, "twice": True})
    await app.workflows.signal(run_id, "go", 1)  # before any worker ran it
    await app.workflows.signal(run_id, "go", 2)
    async with app.running():
        assert await app.workflows.result(run_id, timeout=20) == {"first": 1, "second": 2}
    consumed = await wdb.fetch("SELECT payload, consumed_seq FROM dl_workflow_signals WHERE run_id = $1 "
                               "ORDER BY signal_id", run_id)
    assert [(r["payload"], r["consumed_seq"]) for r in consumed] == [(1, 2), (2, 3)]


async def test_a_wait_times_out_with_none(app: App, wdb: asyncpg.Pool, dsn: str) -> None:
    async with app.running():
        run_id = await app.workflows.start("t.wait", {"dsn": dsn, "timeout": 0.5})
        assert await app.workflows.result(run_id, timeout=20) == {"first": None, "second": None}
    run = await app.workflows.get(run_id)
    assert run.steps[1].kind == "wait" and run.steps[1].error == "timeout"


async def test_signal_errors(app: App, wdb: asyncpg.Pool, dsn: str) -> None:
    with pytest.raises(WorkflowNotFound):
        await app.workflows.signal(uuid.uuid4(), "go")
    with pytest.raises(ValidationFailed):
        await app.workflows.signal(uuid.uuid4(), "bad name!")
    with pytest.raises(ValidationFailed):
        await app.workflows.signal("not-a-uuid", "go")
    async with app.running():
        run_id = await app.workflows.start("t.steps", {"dsn": dsn})
        await app.workflows.result(run_id, timeout=20)
    with pytest.raises(WorkflowFinished):
        await app.workflows.signal(run_id, "go")
    assert await wdb.fetchval("SELECT count(*) FROM dl_workflow_signals") == 0  # nothing written


async def test_gather_joins_every_way_a_child_ends_exactly_once(app: App, wdb: asyncpg.Pool, dsn: str) -> None:
    """Three children: one succeeds, one fails, one waits and is canceled. The join fires once,
    after all three ended, and records how each ended."""
    async with app.running():
        run_id = await app.workflows.start("t.gather", {"dsn": dsn, "modes": ["ok", "fail", "wait"]})
        waiting_child = uuid.uuid5(run_id, "1:2")
        await wait_until(lambda: _waiting(wdb, waiting_child), timeout=15, message="the third child waits")
        assert await wdb.fetchval("SELECT remaining FROM dl_workflow_steps WHERE run_id = $1 AND seq = 1",
                                  run_id) == 1
        await app.workflows.cancel(waiting_child)
        result = await app.workflows.result(run_id, timeout=20)
    assert result == {"results": [0, "failed: failed", "failed: canceled"], "after": 1}
    assert await wdb.fetchval("SELECT remaining FROM dl_workflow_steps WHERE run_id = $1 AND seq = 1", run_id) == 0
    counts = await probe_counts(wdb, run_id)
    assert counts == {"after-join": 1}
    # a child revived by a manual retry after the join decided does not count again
    failed_child = uuid.uuid5(run_id, "1:1")
    await app.retry(failed_child)
    async with app.running():
        with pytest.raises(WorkflowFailed):
            await app.workflows.result(failed_child, timeout=20)
    assert await wdb.fetchval("SELECT remaining FROM dl_workflow_steps WHERE run_id = $1 AND seq = 1", run_id) == 0
    assert (await app.workflows.get(run_id)).status == "succeeded"


async def test_a_lost_child_counts_for_the_join(app: App, wdb: asyncpg.Pool, dsn: str) -> None:
    """The reaper's `lost` is an end like any other: a child whose job is marked lost (its attempts
    ran out as its node died) counts down its parent's join in that same statement."""
    run_id = await app.workflows.start("t.gather", {"dsn": dsn, "modes": ["ok", "wait"]})
    async with app.running():
        waiting_child = uuid.uuid5(run_id, "1:1")
        await wait_until(lambda: _waiting(wdb, waiting_child), timeout=15, message="the second child waits")
    # what the reaper does to a running job of a dead node whose attempts are spent
    await wdb.execute("UPDATE dl_jobs SET status = 'running', attempt = max_attempts, "
                      "lease_expires_at = now() - interval '1 s' WHERE job_id = $1", waiting_child)
    await wdb.execute("SELECT * FROM dl_jobs WHERE false")
    async with app.running():
        await wait_until(lambda: _status(wdb, waiting_child, "lost"), timeout=15, message="the reaper marks it lost")
        result = await app.workflows.result(run_id, timeout=20)
    assert result["results"] == [0, "failed: lost"]


async def test_step_retries_with_backoff_then_records_once(app: App, wdb: asyncpg.Pool, dsn: str) -> None:
    async with app.running():
        run_id = await app.workflows.start("t.flaky", {"dsn": dsn, "succeed_on": 3})
        assert await app.workflows.result(run_id, timeout=20) == {"value": 3}
    run = await app.workflows.get(run_id)
    assert (run.steps[0].state, run.steps[0].attempts) == ("done", 3)
    keys = await wdb.fetch("SELECT DISTINCT step_key FROM wf_probe WHERE run_id = $1", str(run_id))
    assert [r["step_key"] for r in keys] == [f"{run_id}:1"]  # one key across every attempt


async def test_a_step_out_of_attempts_fails_the_run_and_a_fatal_error_is_not_retried(
        app: App, wdb: asyncpg.Pool, dsn: str) -> None:
    async with app.running():
        spent = await app.workflows.start("t.flaky", {"dsn": dsn, "succeed_on": 10, "max_attempts": 2})
        fatal = await app.workflows.start("t.flaky", {"dsn": dsn, "succeed_on": 1, "fatal": True})
        with pytest.raises(WorkflowFailed, match="step 'flaky' failed: RuntimeError: not yet"):
            await app.workflows.result(spent, timeout=20)
        with pytest.raises(WorkflowFailed, match="step 'fatal' failed: FatalError: never"):
            await app.workflows.result(fatal, timeout=20)
    assert await probe_counts(wdb, spent) == {"flaky": 2}
    assert await probe_counts(wdb, fatal) == {"flaky": 1, "fatal": 1}


async def test_code_that_no_longer_matches_the_history_stops_the_run_naming_the_step(
        app: App, wdb: asyncpg.Pool, dsn: str) -> None:
    run_id = await app.workflows.start("t.steps", {"dsn": dsn})
    await wdb.execute("""INSERT INTO dl_workflow_steps (run_id, seq, kind, name, state, result)
                         VALUES ($1, 1, 'step', 'one', 'done', '1'), ($1, 2, 'step', 'reserve', 'done', '2')""",
                      run_id)
    async with app.running():
        with pytest.raises(WorkflowFailed) as failed:
            await app.workflows.result(run_id, timeout=20)
    assert "position 2: it recorded step 'reserve' but the code now asks for step 'two'" in str(failed.value)
    assert await probe_counts(wdb, run_id) == {}  # nothing ran: not 'two', not 'three'


async def test_a_history_longer_than_the_code_stops_the_run(app: App, wdb: asyncpg.Pool, dsn: str) -> None:
    run_id = await app.workflows.start("t.steps", {"dsn": dsn})
    await wdb.execute("""INSERT INTO dl_workflow_steps (run_id, seq, kind, name, state, result)
                         VALUES ($1, 1, 'step', 'one', 'done', '1'), ($1, 2, 'step', 'two', 'done', '2'),
                                ($1, 3, 'step', 'three', 'done', '3'), ($1, 4, 'step', 'four', 'done', '4')""",
                      run_id)
    async with app.running():
        with pytest.raises(WorkflowFailed, match="records step 'four' at position 4"):
            await app.workflows.result(run_id, timeout=20)


async def test_a_sync_workflow_runs_in_a_thread(app: App, wdb: asyncpg.Pool, dsn: str) -> None:
    async with app.running():
        run_id = await app.workflows.start("t.sync", {"x": 1})
        await wait_until(lambda: _waiting(wdb, run_id), timeout=10, message="the sync run waits")
        await app.workflows.signal(run_id, "go", "yes")
        assert await app.workflows.result(run_id, timeout=20) == {"a": 2, "got": "yes"}


async def test_cancel_cascades_to_children(app: App, wdb: asyncpg.Pool, dsn: str) -> None:
    async with app.running():
        run_id = await app.workflows.start("t.gather", {"dsn": dsn, "modes": ["wait", "wait"]})
        children = [uuid.uuid5(run_id, f"1:{i}") for i in range(2)]
        for c in children:
            await wait_until(lambda c=c: _waiting(wdb, c), timeout=15, message="children wait")
        run = await app.workflows.cancel(run_id)
        assert run.status == "canceled"
        for c in children:
            assert (await app.workflows.get(c)).status == "canceled"
        with pytest.raises(WorkflowFinished):
            await app.workflows.cancel(run_id)


async def test_start_is_idempotent_by_key_and_checks_its_input(app: App, wdb: asyncpg.Pool, dsn: str) -> None:
    first = await app.workflows.start("t.steps", {"dsn": dsn}, idempotency_key="order-7")
    again = await app.workflows.start("t.steps", {"dsn": dsn}, idempotency_key="order-7")
    assert first == again
    from dataloader import UnknownWorkflow

    with pytest.raises(UnknownWorkflow):
        await app.workflows.start("t.nope", {})
    with pytest.raises(ValidationFailed):
        await app.workflows.start("t.steps", {"x": float("nan")})
    assert await wdb.fetchval("SELECT count(*) FROM dl_workflow_runs") == 1
    assert "t.steps" in workflows.names()


async def test_many_concurrent_signals_and_wakes_lose_nothing(app: App, wdb: asyncpg.Pool, dsn: str) -> None:
    """Signals racing the run's own hand-back: every run gets its signal without waiting for the
    (long) deadline, whatever moment the signal lands (the wake protocol of migration 0030)."""
    async with app.running():
        runs = [await app.workflows.start("t.wait", {"dsn": dsn, "timeout": 120}) for _ in range(20)]
        # no waiting for the wait: some signals land while the run is running, some before it
        # recorded its wait, some while it is queued
        for i, run_id in enumerate(runs):
            await asyncio.sleep(0.01 * (i % 5))
            await app.workflows.signal(run_id, "go", i)
        results = await asyncio.gather(*(app.workflows.result(r, timeout=30) for r in runs))
    assert [r["first"] for r in results] == list(range(20))


async def test_a_wide_join_fires_once_and_promptly(app: App, wdb: asyncpg.Pool, dsn: str) -> None:
    """40 children ending side by side, many while their parent is still handing itself back: the
    last end wakes it (no waiting for the year-long suspend), and the join is recorded once."""
    async with app.running():
        run_id = await app.workflows.start("t.gather", {"dsn": dsn, "modes": ["ok"] * 40})
        result = await app.workflows.result(run_id, timeout=60)
    assert result == {"results": [i * 10 for i in range(40)], "after": 1}
    assert await wdb.fetchval("SELECT count(*) FROM dl_workflow_runs WHERE parent_run_id = $1 AND joined", run_id) == 40
    done = await wdb.fetchval("SELECT count(*) FROM dl_job_events WHERE job_id = $1 AND kind = 'workflow_gather' "
                              "AND payload->>'state' = 'done'", run_id)
    assert done == 1


HAND_BACK = ("UPDATE dl_jobs SET status = 'queued', attempt = 0, available_at = now() + interval '1 day' "
             "WHERE job_id = $1 RETURNING available_at <= now()")


async def test_a_wake_between_the_last_look_and_the_hand_back_makes_it_due_now(
        app: App, wdb: asyncpg.Pool, dsn: str) -> None:
    """The wake protocol at the SQL level: the attempt read wakes = 0 and remembered it; a signal
    commits before the attempt's hand-back; the hand-back, planned a day away, becomes due now."""
    run_id = await app.workflows.start("t.wait", {"dsn": dsn})
    await wdb.execute("UPDATE dl_jobs SET status = 'running', attempt = 1, started_at = now() WHERE job_id = $1",
                      run_id)
    await wdb.execute("UPDATE dl_workflow_runs SET seen_wakes = 0 WHERE run_id = $1", run_id)
    await app.workflows.signal(run_id, "go", 1)  # the job runs: the signal cannot make it due itself
    due = await wdb.fetchval(HAND_BACK, run_id)
    assert due is True
    # without a wake since the last look, a hand-back keeps its time
    await wdb.execute("UPDATE dl_jobs SET status = 'running', attempt = 1 WHERE job_id = $1", run_id)
    await wdb.execute("UPDATE dl_workflow_runs SET seen_wakes = wakes WHERE run_id = $1", run_id)
    due = await wdb.fetchval(HAND_BACK, run_id)
    assert due is False


async def test_a_version_gate_lets_new_code_branch_for_old_runs(app: App, wdb: asyncpg.Pool, dsn: str) -> None:
    """A run started by version 1 sleeps; version 2 is deployed with two gates: one before the
    recorded steps (the old run takes the old path there) and one after its sleep (where the old
    run had not been yet: it takes the new path). A run started by version 2 takes both."""
    from tests.workflows.flows import versioned, versioned_v2

    old = await app.workflows.start("t.versioned", {"dsn": dsn, "sleep": 1.0})
    try:
        async with app.running():
            await wait_until(lambda: _asleep(wdb, old), timeout=10, message="the old run sleeps")
            workflows.register("t.versioned", versioned_v2, queue=QUEUE, replace=True)  # the deploy
            new = await app.workflows.start("t.versioned", {"dsn": dsn, "sleep": 0.1})
            assert await app.workflows.result(old, timeout=20) == ["a", "notify", "b"]
            assert await app.workflows.result(new, timeout=20) == ["charge", "a", "notify", "b"]
    finally:
        workflows.register("t.versioned", versioned, queue=QUEUE, replace=True)
    assert await probe_counts(wdb, old) == {"a": 1, "notify": 1, "b": 1}
    assert [(s.kind, s.name) for s in (await app.workflows.get(old)).steps] == [
        ("step", "a"), ("sleep", "sleep"), ("patch", "notify-after-sleep"), ("step", "notify"), ("step", "b")]


async def test_restart_from_a_step_keeps_the_steps_before_it(app: App, wdb: asyncpg.Pool, dsn: str) -> None:
    from dataloader import JobNotRetryable

    async with app.running():
        run_id = await app.workflows.start("t.fixable", {"dsn": dsn, "fix_after": 2})
        with pytest.raises(WorkflowFailed, match="bug"):
            await app.workflows.result(run_id, timeout=20)
        with pytest.raises(ValidationFailed, match="no recorded step 'zz'"):
            await app.workflows.restart(run_id, from_step="zz")
        run = await app.workflows.restart(run_id, from_step="b")  # "the code was fixed"
        # the workers are running: the replay may already have recorded b again by this read
        assert (run.steps[0].name, run.steps[0].result) == ("a", 1)
        assert await app.workflows.result(run_id, timeout=20) == {"a": 1, "b": 2, "c": 1, "got": None}
        with pytest.raises(JobNotRetryable):
            await app.workflows.restart(run_id)  # it succeeded: nothing to restart
    assert await probe_counts(wdb, run_id) == {"a": 1, "b": 2, "c": 1}
    kinds = [e.kind for e in await app.events(run_id)]
    assert "workflow_restart" in kinds


async def test_restart_frees_the_signals_of_the_waits_it_cut(app: App, wdb: asyncpg.Pool, dsn: str) -> None:
    run_id = await app.workflows.start("t.fixable", {"dsn": dsn, "fix_after": 2, "wait": True})
    await app.workflows.signal(run_id, "go", "once")
    async with app.running():
        with pytest.raises(WorkflowFailed):
            await app.workflows.result(run_id, timeout=20)
        await app.workflows.restart(run_id)  # from the start: the wait takes the same signal again
        assert await app.workflows.result(run_id, timeout=20) == {"a": 2, "b": 2, "c": 1, "got": "once"}


async def test_a_bulk_cancel_of_children_counts_for_the_join(app: App, wdb: asyncpg.Pool, dsn: str) -> None:
    """A bulk operation ends jobs with its own statement: its ends count down the join like any other."""
    async with app.running():
        run_id = await app.workflows.start("t.gather", {"dsn": dsn, "modes": ["wait", "wait"]})
        children = [uuid.uuid5(run_id, f"1:{i}") for i in range(2)]
        for c in children:
            await wait_until(lambda c=c: _waiting(wdb, c), timeout=15, message="children wait")
        op = await app.operations.start("cancel", {"tasks": ["workflow:t.child"], "statuses": ["queued"]})
        await app.operations.wait(op.id, timeout=30)
        result = await app.workflows.result(run_id, timeout=20)
    assert result == {"results": ["failed: canceled", "failed: canceled"], "after": 1}


async def test_a_fail_fast_gather_decides_at_the_first_failure_and_cancels_the_rest(
        app: App, wdb: asyncpg.Pool, dsn: str) -> None:
    async with app.running():
        run_id = await app.workflows.start("t.gather", {"dsn": dsn, "modes": ["wait", "fail", "wait"],
                                                        "fail_fast": True})
        result = await app.workflows.result(run_id, timeout=20)
        # the others are reported as they were when it decided: canceled while queued (waiting), or
        # still running with the cancel asked for — and they end canceled
        assert result["results"][1] == "failed: failed" and result["after"] == 1, result
        assert {result["results"][0], result["results"][2]} <= {"failed: canceled", "failed: running"}, result
        for i in (0, 2):
            child_id = uuid.uuid5(run_id, f"1:{i}")
            await wait_until(lambda c=child_id: _status(wdb, c, "canceled"), timeout=15, message="the rest canceled")
    done = await wdb.fetchval("SELECT count(*) FROM dl_job_events WHERE job_id = $1 AND kind = 'workflow_gather' "
                              "AND payload->>'state' = 'done'", run_id)
    assert done == 1
