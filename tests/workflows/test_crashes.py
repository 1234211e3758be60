"""Workflows through kill -9 of real `dataloader worker` processes and a real PostgreSQL restart.
`wf_probe` (a table outside the engine) counts every execution of every step: a step recorded
before the crash never runs again; the step cut off by the crash runs again, with the same key."""

from __future__ import annotations

import signal

import pytest

from dataloader import App
from tests.conftest import wait_until
from tests.workflows.conftest import probe_counts, workflow_settings
from tests.workflows.flows import QUEUE

FAST = {"heartbeat_sec": 0.3, "reaper_period_sec": 0.5, "poll_fallback_sec": 1}


@pytest.mark.timeout(120)
async def test_kill_9_mid_step_recorded_steps_are_not_run_again_and_the_run_completes(
        dsn, wdb, workers, subprocess_env) -> None:
    subprocess_env["DL_PIPELINE_MODULES"] = "tests.workflows.flows"
    async with App(workflow_settings(dsn)) as app:
        run_id = await app.workflows.start("t.steps", {"dsn": dsn, "pause": 60}, lease_ttl_sec=2)
        victim = workers(queues={QUEUE: 2}, **FAST)
        await victim.wait_ready()
        # step one is recorded, step two has begun (its first execution lingers 60 s)
        await wait_until(lambda: _count(wdb, run_id, "two", 1), timeout=30, message="step two to start")
        assert (await app.workflows.get(run_id)).steps[0].state == "done"
        victim.signal(signal.SIGKILL)
        assert await victim.wait_exit() == -signal.SIGKILL
        rescuer = workers(queues={QUEUE: 2}, **FAST)
        await rescuer.wait_ready()
        # the reaper takes the run back once its 2 s lease ran out; the rescuer replays it
        assert await app.workflows.result(run_id, timeout=60) == {"one": 1, "two": 2, "three": 1}
    assert await probe_counts(wdb, run_id) == {"one": 1, "two": 2, "three": 1}
    keys = await wdb.fetch("SELECT step_key, pid FROM wf_probe WHERE run_id = $1 AND step = 'two' ORDER BY id",
                           str(run_id))
    assert [r["step_key"] for r in keys] == [f"{run_id}:2", f"{run_id}:2"]  # the same key both times
    assert keys[0]["pid"] == victim.pid and keys[1]["pid"] == rescuer.pid


@pytest.mark.timeout(120)
async def test_kill_9_while_a_run_sleeps_and_its_children_run(dsn, wdb, workers, subprocess_env) -> None:
    """A run asleep holds no worker: killing the node loses nothing. A parent joining children
    across a kill -9 gets each child's end counted once and completes."""
    subprocess_env["DL_PIPELINE_MODULES"] = "tests.workflows.flows"
    async with App(workflow_settings(dsn)) as app:
        sleeper = await app.workflows.start("t.sleep", {"dsn": dsn, "seconds": 3}, lease_ttl_sec=2)
        parent = await app.workflows.start("t.gather", {"dsn": dsn, "modes": ["ok", "ok", "ok"]}, lease_ttl_sec=2)
        victim = workers(queues={QUEUE: 4}, **FAST)
        await victim.wait_ready()
        await wait_until(lambda: _recorded(wdb, sleeper, "sleep"), timeout=30, message="the sleeper to sleep")
        await wait_until(lambda: wdb.fetchval("SELECT count(*) FROM dl_workflow_runs WHERE parent_run_id = $1",
                                              parent), timeout=30, message="children to start")
        victim.signal(signal.SIGKILL)
        await victim.wait_exit()
        rescuer = workers(queues={QUEUE: 4}, **FAST)
        await rescuer.wait_ready()
        assert await app.workflows.result(sleeper, timeout=60) == {"before": 1, "after": 1}
        assert (await app.workflows.result(parent, timeout=60))["results"] == [0, 10, 20]
    assert await probe_counts(wdb, sleeper) == {"before": 1, "after": 1}
    assert await probe_counts(wdb, parent) == {"after-join": 1}
    assert await wdb.fetchval("SELECT remaining FROM dl_workflow_steps WHERE run_id = $1 AND seq = 1", parent) == 0


@pytest.mark.timeout(180)
@pytest.mark.exclusive(when="shared_server")  # restarts PostgreSQL: alone when the workers share one
async def test_a_postgres_restart_mid_sleep_and_wait_is_weather(dsn, wdb, workers, subprocess_env, restart) -> None:
    subprocess_env["DL_PIPELINE_MODULES"] = "tests.workflows.flows"
    async with App(workflow_settings(dsn)) as app:
        sleeper = await app.workflows.start("t.sleep", {"dsn": dsn, "seconds": 2}, lease_ttl_sec=5)
        waiter = await app.workflows.start("t.wait", {"dsn": dsn, "timeout": 120}, lease_ttl_sec=5)
        worker = workers(queues={QUEUE: 4}, **FAST)
        await worker.wait_ready()
        # recorded, not only run: a restart between a step and its record may run it again (at least once)
        await wait_until(lambda: _recorded(wdb, sleeper, "sleep"), timeout=30, message="the sleeper to sleep")
        await wait_until(lambda: _recorded(wdb, waiter, "wait"), timeout=30, message="the waiter to wait")
        assert await restart() == "restarted"
        await _retrying(lambda: app.workflows.signal(waiter, "go", "after the restart"))
        assert await _retrying(lambda: app.workflows.result(sleeper, timeout=60)) == {"before": 1, "after": 1}
        assert await _retrying(lambda: app.workflows.result(waiter, timeout=60)) == {
            "first": "after the restart", "second": None}
        assert worker.proc is not None and worker.proc.poll() is None, "the worker died with the restart"
    assert await probe_counts(wdb, sleeper) == {"before": 1, "after": 1}
    assert await probe_counts(wdb, waiter) == {"started": 1}


async def _retrying(call):
    """The test's own pool meets the restart too: its first statements may find dead connections."""
    from dataloader.storage.db import is_connection_error

    for _ in range(50):
        try:
            return await call()
        except Exception as exc:
            if not is_connection_error(exc):
                raise
            import asyncio

            await asyncio.sleep(0.2)
    return await call()


async def _count(pool, run_id, step: str, n: int) -> bool:
    try:
        return await pool.fetchval("SELECT count(*) FROM wf_probe WHERE run_id = $1 AND step = $2",
                                   str(run_id), step) >= n
    except Exception:
        return False


@pytest.mark.timeout(180)
async def test_two_nodes_killed_again_and_again_never_rerun_a_recorded_step(dsn, wdb, workers, subprocess_env) -> None:
    """16 runs on two worker processes, one of them killed with -9 and restarted three times while
    steps run. For every step of every run, against the probe: no execution began after its record
    committed, and the recorded result is the count of its executions (the last one is the one
    recorded). Every run completes."""
    import asyncio
    import random

    subprocess_env["DL_PIPELINE_MODULES"] = "tests.workflows.flows"
    async with App(workflow_settings(dsn)) as app:
        runs = [await app.workflows.start("t.steps", {"dsn": dsn, "pause": 0.4}, lease_ttl_sec=2) for _ in range(16)]
        steady = workers(queues={QUEUE: 3}, **FAST)
        victim = workers(queues={QUEUE: 3}, **FAST)
        await steady.wait_ready()
        await victim.wait_ready()
        rng = random.Random(37)
        for _ in range(3):
            await asyncio.sleep(rng.uniform(0.3, 1.2))
            victim.signal(signal.SIGKILL)
            await victim.wait_exit()
            victim = workers(queues={QUEUE: 3}, **FAST)
            await victim.wait_ready()
        results = await asyncio.gather(*(app.workflows.result(r, timeout=90) for r in runs))
    late = await wdb.fetch("""
        SELECT p.run_id, p.step, p.at, s.finished_at FROM wf_probe p
        JOIN dl_workflow_steps s ON s.run_id::text = p.run_id AND s.name = p.step
        WHERE p.at > s.finished_at""")
    assert not late, f"steps that ran after their result was recorded: {[dict(r) for r in late]}"
    for run_id, result in zip(runs, results, strict=True):
        counts = await probe_counts(wdb, run_id)
        assert result == counts, (run_id, result, counts)  # each recorded result = its executions


async def _recorded(pool, run_id, kind: str) -> bool:
    return bool(await pool.fetchval("SELECT count(*) FROM dl_workflow_steps WHERE run_id = $1 AND kind = $2",
                                    run_id, kind))
