"""Restarting a process from its start, its error, a task or an event (issue 11): the state the task
found comes back, the events since go, the task and the later calls run again in order, with the
processor's current (fixed) code; and a restart never races a task of the process."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest

from dataloader import App
from dataloader.exceptions import (
    FatalError,
    InvalidProcessRequest,
    ProcessBusy,
    ProcessNotFound,
    ProcessTaskFailed,
    RestartNotPossible,
)
from dataloader.processes import Intent, Process, ProcessTask, SetTimer, processor
from tests.conftest import wait_until


class Ledger:
    """A balance; `add` with a negative amount breaks while `buggy` (the bad deploy)."""

    def __init__(self) -> None:
        self.buggy = False
        self.timeouts = 0
        self.seen: list[tuple[int, int]] = []  # (amount, the balance the call found), in run order

    def register(self, ns: str) -> None:
        @processor(ns)
        async def ledger(task: ProcessTask, process: Process, ctx: Any) -> Intent:
            state = dict(process.aux_state or {})
            args = task.args or {}
            if task.type.value == "init":
                return Intent(events=[{"op": "open", "balance": args["balance"]}],
                              aux_state={"balance": args["balance"]}, response=args["balance"],
                              action=SetTimer(after=args["timer"]) if "timer" in args else None)
            if task.type.value == "timeout":
                self.timeouts += 1
                return Intent(events=[{"op": "tick"}], aux_state={**state, "ticks": state.get("ticks", 0) + 1})
            if args.get("sleep"):
                await asyncio.sleep(args["sleep"])
            if self.buggy and args["amount"] < 0:
                raise FatalError("negative amounts are not supported")
            self.seen.append((args["amount"], state["balance"]))
            balance = state["balance"] + args["amount"]
            return Intent(events=[{"op": "add", "amount": args["amount"]}], aux_state={**state, "balance": balance},
                          response=balance)


async def all_tasks_ended(app: App, ns: str, pid: str) -> bool:
    return all(t["status"] != "waiting" for t in await app.processes.trace(ns, pid))


async def history(app: App, ns: str, pid: str) -> list[dict[str, Any]]:
    return [e.payload for e in (await app.processes.get(ns, pid)).history]


async def test_restart_from_error_reruns_the_failed_call_with_fixed_code(app, ns, pdb):
    ledger = Ledger()
    ledger.register(ns)
    ledger.buggy = True
    async with app.running():
        await app.processes.init(ns, "acc", {"balance": 10})
        assert await app.processes.call(ns, "acc", {"amount": 5}) == 15
        with pytest.raises(ProcessTaskFailed):
            await app.processes.call(ns, "acc", {"amount": -3})
        broken = await app.processes.get(ns, "acc")
        assert broken.status.value == "error" and broken.aux_state == {"balance": 15}
        ledger.buggy = False  # the fix is deployed
        result = await app.processes.restart(ns, "acc", "error")
        assert result.task_id == broken.corrupted_by and result.status == "running"
        assert result.removed_events == 0 and len(result.queued) == 1
        await wait_until(lambda: all_tasks_ended(app, ns, "acc"), message="the re-run call")
    process = await app.processes.get(ns, "acc")
    assert process.status.value == "running" and process.aux_state == {"balance": 12}
    assert await history(app, ns, "acc") == [{"op": "open", "balance": 10}, {"op": "add", "amount": 5},
                                              {"op": "add", "amount": -3}]
    trace = await app.processes.trace(ns, "acc")
    rerun = [t for t in trace if t["restart_of"] is not None]
    assert [(t["type"], t["status"], t["restart_of"]) for t in rerun] == [
        ("call", "finished", str(broken.corrupted_by))]
    feed = await pdb.fetch("SELECT kind, payload FROM dl_process_feed WHERE ns = $1 AND kind = 'restart'", ns)
    assert len(feed) == 1 and feed[0]["payload"]["from"] == "error"


async def test_restart_from_start_rebuilds_history_from_the_same_inputs(app, ns):
    ledger = Ledger()
    ledger.register(ns)
    async with app.running():
        await app.processes.init(ns, "acc", {"balance": 1})
        for amount in (2, 3, 4):
            await app.processes.call(ns, "acc", {"amount": amount})
        before = await history(app, ns, "acc")
        result = await app.processes.restart(ns, "acc", "start")
        assert result.task_type == "init" and result.status == "init" and result.removed_events == 4
        assert len(result.queued) == 4  # init and the three calls, in the order they ran
        await wait_until(lambda: all_tasks_ended(app, ns, "acc"), message="the re-run tasks")
        process = await app.processes.get(ns, "acc")
        assert process.aux_state == {"balance": 10} and process.status.value == "running"
        assert await history(app, ns, "acc") == before
        assert [e.event_id for e in process.history] == [1, 2, 3, 4]
        # the process is usable afterwards
        assert await app.processes.call(ns, "acc", {"amount": 10}) == 20


async def test_restart_from_an_event_goes_back_to_the_task_that_wrote_it(app, ns):
    ledger = Ledger()
    ledger.register(ns)
    async with app.running():
        await app.processes.init(ns, "acc", {"balance": 0})
        for amount in (1, 2, 3):
            await app.processes.call(ns, "acc", {"amount": amount})
        result = await app.processes.restart(ns, "acc", event_id=3)  # written by the "+2" call
        assert result.removed_events == 2 and len(result.queued) == 2
        await wait_until(lambda: all_tasks_ended(app, ns, "acc"), message="the re-run calls")
        # the re-run +2 call found the state the +2 call had found (read from the processor, not from
        # the row right after the restart: the re-queued calls may already have run by then)
        assert ledger.seen[-2:] == [(2, 1), (3, 3)], ledger.seen
        assert (await app.processes.get(ns, "acc")).aux_state == {"balance": 6}
        assert [h.get("amount") for h in await history(app, ns, "acc")] == [None, 1, 2, 3]
        # and from a task id
        trace = await app.processes.trace(ns, "acc")
        last = trace[-1]
        result = await app.processes.restart(ns, "acc", task_id=last["task_id"])
        assert result.removed_events == 1 and len(result.queued) == 1
        await wait_until(lambda: all_tasks_ended(app, ns, "acc"), message="the re-run call")
        assert (await app.processes.get(ns, "acc")).aux_state == {"balance": 6}


async def test_restart_from_a_timer_rearms_it_and_it_fires_again(app, ns):
    ledger = Ledger()
    ledger.register(ns)
    async with app.running():
        await app.processes.init(ns, "acc", {"balance": 0, "timer": 0.1})
        await wait_until(lambda: ledger.timeouts == 1, message="the timer")
        await wait_until(lambda: all_tasks_ended(app, ns, "acc"))
        tick = next(t for t in await app.processes.trace(ns, "acc") if t["type"] == "timeout")
        result = await app.processes.restart(ns, "acc", task_id=tick["task_id"])
        assert result.queued == [] and result.timer is not None and result.timer.task_id is not None
        await wait_until(lambda: ledger.timeouts == 2, message="the restored timer")
        await wait_until(lambda: all_tasks_ended(app, ns, "acc"))
    process = await app.processes.get(ns, "acc")
    assert process.aux_state == {"balance": 0, "ticks": 1} and process.timer is None
    assert [h["op"] for h in await history(app, ns, "acc")] == ["open", "tick"]


async def test_restart_refuses_while_a_task_runs_and_changes_nothing(app, ns, pdb):
    ledger = Ledger()
    ledger.register(ns)
    async with app.running():
        await app.processes.init(ns, "acc", {"balance": 0})
        slow = asyncio.create_task(app.processes.call(ns, "acc", {"amount": 1, "sleep": 1.0}))
        await wait_until(lambda: pdb.fetchval(
            "SELECT count(*) FROM dl_jobs WHERE lock_key = $1 AND status = 'running'", f"process:{ns}:acc"))
        version = await pdb.fetchval("SELECT version FROM dl_processes WHERE ns = $1", ns)
        with pytest.raises(ProcessBusy):
            await app.processes.restart(ns, "acc", "start")
        assert await pdb.fetchval("SELECT version FROM dl_processes WHERE ns = $1", ns) == version
        assert await slow == 1


async def test_restart_points_that_do_not_exist_or_cannot_be_gone_back_to(app, ns, pdb):
    ledger = Ledger()
    ledger.register(ns)
    await app.processes.put(ns, {"id": "imported", "aux_state": {"balance": 3},
                                 "history": [{"payload": {"op": "open", "balance": 3}}]})
    with pytest.raises(RestartNotPossible, match="imported"):
        await app.processes.restart(ns, "imported", "start")
    with pytest.raises(RestartNotPossible, match="imported"):
        await app.processes.restart(ns, "imported", event_id=1)
    with pytest.raises(ProcessNotFound):
        await app.processes.restart(ns, "imported", event_id=2)
    with pytest.raises(ProcessNotFound):
        await app.processes.restart(ns, "imported", task_id=uuid.uuid4())
    with pytest.raises(RestartNotPossible, match="not broken"):
        await app.processes.restart(ns, "imported", "error")
    with pytest.raises(ProcessNotFound):
        await app.processes.restart(ns, "nobody", "start")
    for bad in ({}, {"from_": "start", "event_id": 1}, {"from_": "middle"}, {"event_id": 0},
                {"event_id": True}, {"task_id": "not-a-uuid"}):
        with pytest.raises(InvalidProcessRequest):
            await app.processes.restart(ns, "imported", **bad)
    assert await pdb.fetchval("SELECT version FROM dl_processes WHERE id = 'imported'") == 1
    assert await pdb.fetchval("SELECT count(*) FROM dl_process_feed WHERE kind = 'restart'") == 0


async def test_bulk_restart_of_the_processes_a_bad_deploy_broke(app, ns, pdb):
    """A tracked operation: a dry run counts them, the runner restarts each from its error with the
    fixed code in batches, progress is exact, and the healthy process is left alone."""
    ledger = Ledger()
    ledger.register(ns)
    ledger.buggy = True
    async with app.running():
        for n in range(30):
            await app.processes.init(ns, f"acc-{n:02}", {"balance": n})
            with pytest.raises(ProcessTaskFailed):
                await app.processes.call(ns, f"acc-{n:02}", {"amount": -1})
        await app.processes.init(ns, "healthy", {"balance": 0})
        ledger.buggy = False  # the fix is deployed
        operations = await pdb.fetchval("SELECT count(*) FROM dl_operations")
        dry = await app.processes.restart_many({"ns": ns, "statuses": ["error"]}, "error", dry_run=True)
        assert dry.total == 30
        assert await pdb.fetchval("SELECT count(*) FROM dl_operations") == operations  # it started nothing
        op = await app.processes.restart_many({"ns": ns, "statuses": ["error"], "detail": "*negative*"}, "error",
                                              started_by="alice", batch_size=7)
        assert op.total == 30 and op.kind == "process_restart"
        done = await app.operations.wait(op.id, timeout=60)
        assert (done.state, done.done, done.changed) == ("finished", 30, 30)
        await wait_until(lambda: pdb.fetchval(
            "SELECT count(*) = 0 FROM dl_process_tasks WHERE ns = $1 AND status = 'waiting'", ns), timeout=30)
    balances = {r["id"]: r["aux_state"]["balance"] for r in await pdb.fetch(
        "SELECT id, aux_state FROM dl_processes WHERE ns = $1 AND status = 'running'", ns)}
    assert balances == {**{f"acc-{n:02}": n - 1 for n in range(30)}, "healthy": 0}
    audit = [e.kind for e in await app.operations.events(op.id)]
    assert audit[0] == "created" and audit[-1] == "finished"


async def test_bulk_restart_skips_what_it_cannot_restart_and_says_why(app, ns, pdb):
    ledger = Ledger()
    ledger.register(ns)
    await app.processes.put(ns, {"id": "imported", "status": "error", "detail": "broken elsewhere"})
    async with app.running():
        op = await app.processes.restart_many({"ns": ns}, "error")
        done = await app.operations.wait(op.id, timeout=30)
    assert (done.state, done.done, done.changed, done.skipped) == ("finished", 1, 0, 1)
    skipped = [e.payload for e in await app.operations.events(op.id) if e.kind == "skipped"]
    assert skipped[0]["processes"][0]["id"] == "imported"
    assert "RestartNotPossible" in skipped[0]["processes"][0]["reason"]


@pytest.mark.parametrize("filter,params", [
    ({}, {"from": "error"}),
    ({"ns": "bad ns!"}, {"from": "error"}),
    ({"ns": "x", "statuses": ["sleeping"]}, {"from": "error"}),
    ({"ns": "x", "ids": ["\x00"]}, {"from": "error"}),
    ({"ns": "x", "extra": 1}, {"from": "error"}),
    ({"ns": "x"}, {"from": "middle"}),
    ({"ns": "x"}, {"from_task": str(uuid.uuid4())}),
    ({"ns": "x"}, {}),
])
async def test_bulk_restart_bad_input_is_refused_and_writes_nothing(app, pdb, filter, params):
    from dataloader.exceptions import InvalidJobRequest

    before = await pdb.fetchval("SELECT count(*) FROM dl_operations")
    with pytest.raises(InvalidJobRequest):
        await app.operations.start("process_restart", filter, params=params)
    assert await pdb.fetchval("SELECT count(*) FROM dl_operations") == before


async def test_tasks_from_before_migration_0016_kept_no_state(app, ns, pdb):
    """An init's starting state is known, so a process whose tasks kept none restarts from its start;
    from a later task it cannot, and says why."""
    ledger = Ledger()
    ledger.register(ns)
    async with app.running():
        await app.processes.init(ns, "old", {"balance": 4})
        await app.processes.call(ns, "old", {"amount": 1})
        await pdb.execute("UPDATE dl_process_tasks SET state_before = NULL WHERE ns = $1", ns)
        with pytest.raises(RestartNotPossible, match="kept no state"):
            await app.processes.restart(ns, "old", event_id=2)
        result = await app.processes.restart(ns, "old", "start")
        assert result.status == "init" and result.removed_events == 2 and len(result.queued) == 2
        await wait_until(lambda: all_tasks_ended(app, ns, "old"), message="the re-run tasks")
    process = await app.processes.get(ns, "old")
    assert process.aux_state == {"balance": 5} and process.metadata == {}
