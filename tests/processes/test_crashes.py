"""kill -9 of a node in the middle of a process task, with real worker processes. Default
(`on_lost="rerun"`): the lease expires, the task runs again on a live node, fenced, and lands
once (one event, one response, one feed row). `on_lost="error"` (progressor's zombie): the
process is parked in error instead."""

from __future__ import annotations

import asyncio

import pytest

from dataloader import ProcessTaskFailed
from dataloader.processes import processors
from tests.conftest import wait_until
from tests.processes.processors import register

WORKER = {"pipeline_modules": "tests.processes.cli_processors", "heartbeat_sec": 0.5, "reaper_period_sec": 0.5}


@pytest.fixture
def local_processors():
    """The namespaces of tests/processes/cli_processors.py, registered here too (to call them)."""
    register("clitest", lease_ttl_sec=2, replace=True)
    register("zombie", lease_ttl_sec=2, on_lost="error", replace=True)
    yield
    processors.unregister("clitest")
    processors.unregister("zombie")


async def _running_call(pdb, ns: str, pid: str) -> bool:
    return bool(await pdb.fetchval(
        "SELECT count(*) FROM dl_jobs j JOIN dl_process_tasks t ON t.task_id = j.job_id "
        "WHERE t.ns = $1 AND t.process_id = $2 AND t.task_type = 'call' AND j.status = 'running'", ns, pid))


async def _kill_mid_call(app, pdb, workers, ns: str, sleep: float = 2.5) -> tuple[asyncio.Task, object]:
    """`sleep`: the call's length. A test whose call must never end must make it outlast any poll:
    at 2.5 s a loaded machine's poll saw it running so late that it had finished before the kill."""
    first = workers(queues={"plain": 1}, **WORKER)
    await first.wait_ready()
    await app.processes.init(ns, "k1", {}, timeout=60)
    call = asyncio.create_task(app.processes.call(ns, "k1", {"n": 1, "sleep": sleep}, timeout=60))
    await wait_until(lambda: _running_call(pdb, ns, "k1"), timeout=30)
    first.kill()  # SIGKILL: no goodbye, its lease runs out
    second = workers(queues={"plain": 1}, **WORKER)
    await second.wait_ready()
    return call, second


async def test_kill_9_mid_task_reruns_it_on_a_live_node_once(app, pdb, workers, local_processors):
    call, _ = await _kill_mid_call(app, pdb, workers, "clitest")
    response = await asyncio.wait_for(call, 60)
    assert response["n"] == 1
    process = await app.processes.get("clitest", "k1")
    assert [e.payload["kind"] for e in process.history] == ["init", "call"], "the dead attempt wrote something"
    attempts = await pdb.fetchval("SELECT attempt FROM dl_jobs WHERE job_id = (SELECT task_id FROM dl_process_tasks "
                                  "WHERE task_type = 'call' AND ns = 'clitest')")
    assert attempts == 2

    async def feed_kinds() -> list:
        return [(i.kind, i.event_id) for i in (await app.processes.feed("clitest", limit=100)).items]

    # served once every older transaction ended (a moment after the commit): exactly once each
    await wait_until(lambda: _has(feed_kinds, 3), timeout=10)
    assert await feed_kinds() == [("init", None), ("event", 1), ("event", 2)]


async def _has(read, count: int) -> bool:
    return len(await read()) >= count


async def test_kill_9_mid_task_with_on_lost_error_parks_the_process(app, pdb, workers, local_processors):
    call, _ = await _kill_mid_call(app, pdb, workers, "zombie", sleep=60)  # the kill always cuts it
    with pytest.raises(ProcessTaskFailed, match="zombie detected"):
        await asyncio.wait_for(call, 60)
    process = await app.processes.get("zombie", "k1")
    assert process.status.value == "error" and process.detail.startswith("zombie detected")
    assert [e.payload["kind"] for e in process.history] == ["init"]
    task = await pdb.fetchval("SELECT task_id FROM dl_process_tasks WHERE ns = 'zombie' AND task_type = 'call'")
    assert process.corrupted_by == task
    # an operator repairs it; the process works again
    await app.processes.simple_repair("zombie", "k1")
    assert (await app.processes.call("zombie", "k1", {"n": 2}, timeout=60))["n"] == 2


async def test_a_task_lost_on_its_last_attempt_puts_the_process_in_error(app, pdb, workers, local_processors):
    """The reaper ends a task whose node died on its last attempt as `lost`; its process must not
    stay `running` with a task that will never end: the same statement puts it in `error`
    (corrupted_by = the task), writes the feed's error row and answers the waiting caller."""
    first = workers(queues={"plain": 1}, **WORKER)
    await first.wait_ready()
    await app.processes.init("clitest", "lost1", {}, timeout=60)
    # long enough that the kill always cuts it (it never runs again here): at 2.5 s, a loaded machine's
    # poll once saw the call running so late that it had finished before the kill -9
    call = asyncio.create_task(app.processes.call("clitest", "lost1", {"n": 1, "sleep": 60}, timeout=60))
    await wait_until(lambda: _running_call(pdb, "clitest", "lost1"), timeout=30)
    first.kill()
    task_id = await pdb.fetchval("SELECT task_id FROM dl_process_tasks WHERE ns = 'clitest' AND process_id = 'lost1' "
                                 "AND task_type = 'call'")
    await pdb.execute("UPDATE dl_jobs SET max_attempts = attempt WHERE job_id = $1", task_id)  # its last one
    second = workers(queues={"plain": 1}, **WORKER)  # its reaper finds the expired lease
    await second.wait_ready()
    with pytest.raises(ProcessTaskFailed, match="lost"):
        await asyncio.wait_for(call, 60)
    assert await pdb.fetchval("SELECT status FROM dl_jobs WHERE job_id = $1", task_id) == "lost"
    process = await app.processes.get("clitest", "lost1")
    assert (process.status.value, process.corrupted_by) == ("error", task_id)
    assert "lost" in process.detail
    kinds = [i.kind for i in (await app.processes.feed("clitest", limit=100)).items if i.process_id == "lost1"]
    assert kinds[-1] == "error"
    await app.processes.simple_repair("clitest", "lost1")
    assert (await app.processes.call("clitest", "lost1", {"n": 2}, timeout=60))["n"] == 2


async def test_a_process_a_dead_node_parked_restarts_from_its_error_on_a_live_node(app, pdb, workers,
                                                                                  local_processors):
    """Recovery after a real kill -9 (issue 11): the process the dead node's task parked in error is
    restarted from that task; the surviving worker process runs it again, once."""
    # its re-run call runs the same args, so the call is long enough for the kill to cut it on a
    # loaded machine (at 2.5 s a late poll let it finish first: no zombie) and short enough to re-run
    call, _ = await _kill_mid_call(app, pdb, workers, "zombie", sleep=8)
    with pytest.raises(ProcessTaskFailed, match="zombie detected"):
        await asyncio.wait_for(call, 60)
    result = await app.processes.restart("zombie", "k1", "error")
    assert (result.task_type, result.status, len(result.queued)) == ("call", "running", 1)
    await wait_until(lambda: pdb.fetchval("SELECT status = 'finished' FROM dl_process_tasks WHERE task_id = $1",
                                          result.queued[0]), timeout=30, message="the re-run call")
    process = await app.processes.get("zombie", "k1")
    assert process.status.value == "running" and process.corrupted_by is None
    assert [e.payload["kind"] for e in process.history] == ["init", "call"]
    assert (await app.processes.check("zombie")).findings == []
