"""Processes against a real PostgreSQL, mirroring progressor's own suite: init and call with
synchronous responses, timers (fire, reschedule, replace, unset, blocked by a call, remove),
failure rules (call errors, timer retries, repairs, simple repairs), ordering of concurrent calls,
history paging, idempotency and remove."""

from __future__ import annotations

import asyncio
import itertools
import logging

import pytest

from dataloader import App
from dataloader.exceptions import (
    IdempotencyConflict,
    InvalidProcessRequest,
    ProcessExists,
    ProcessNotFound,
    ProcessTaskFailed,
    ProcessTimeout,
    ProcessWrongStatus,
    UnknownNamespace,
)
from dataloader.processes import Event, HistoryRange, ProcessStatus, RetryPolicy, TraceEntry
from tests.conftest import wait_until
from tests.processes.processors import STEPS, Boom, gate, register, started


async def kinds(app: App, ns: str, pid: str) -> list[str]:
    process = await app.processes.get(ns, pid)
    return [e.payload["kind"] for e in process.history]


async def status(app: App, ns: str, pid: str) -> str:
    return (await app.processes.get(ns, pid)).status.value


async def test_init_and_call_answer_synchronously_and_append_history(app, ns, pdb):
    register(ns)
    async with app.running():
        assert await app.processes.init(ns, "p1", {"n": 1}) == {
            "kind": "init", "n": 1, "history": 0, "first": None, "last": None}
        response = await app.processes.call(ns, "p1", {"n": 2, "aux": {"balance": 5}})
        assert response == {"kind": "call", "n": 2, "history": 1, "first": 1, "last": 1}
    process = await app.processes.get(ns, "p1")
    assert process.status is ProcessStatus.running and process.aux_state == {"balance": 5}
    assert [e.event_id for e in process.history] == [1, 2]
    assert [e.payload["kind"] for e in process.history] == ["init", "call"]
    assert process.previous_status is ProcessStatus.init
    # one job per task, all of the process's lock_key, all finished
    rows = await pdb.fetch("SELECT lock_key, status::text FROM dl_jobs WHERE queue = $1", f"process:{ns}")
    assert {(r["lock_key"], r["status"]) for r in rows} == {(f"process:{ns}:p1", "succeeded")}


async def test_bad_requests_write_nothing(app, ns, pdb):
    register(ns)
    with pytest.raises(UnknownNamespace):
        await app.processes.init("nobody", "p1", {})
    with pytest.raises(InvalidProcessRequest):
        await app.processes.init(ns, "", {})
    with pytest.raises(InvalidProcessRequest):
        await app.processes.init(ns, "p1", {"x": float("nan")})
    with pytest.raises(InvalidProcessRequest):
        await app.processes.init(ns, "p1", {"x": "\x00"})
    with pytest.raises(ProcessNotFound):
        await app.processes.call(ns, "missing", {})
    with pytest.raises(InvalidProcessRequest):
        await app.processes.get(ns, "p1", {"direction": "sideways"})
    assert await pdb.fetchval("SELECT count(*) FROM dl_processes") == 0
    assert await pdb.fetchval("SELECT count(*) FROM dl_jobs") == 0


async def test_simple_timer_fires_on_time_and_reschedules(app, ns):
    """A timer set by init fires (within about a second, no scan loop) and its handler may arm the
    next one (reschedule)."""
    register(ns)
    async with app.running():
        await app.processes.init(ns, "p1", {"timer": 0.5, "aux": {"then": {"timer": 0.3}}})
        armed = (await app.processes.get(ns, "p1")).timer
        assert armed is not None and armed.type == "timeout"
        await wait_until(lambda: _count_kind(app, ns, "p1", "timeout", 2), timeout=15)
    process = await app.processes.get(ns, "p1")
    fired = [e.timestamp for e in process.history if e.payload["kind"] == "timeout"]
    assert (fired[0] - armed.at).total_seconds() < 1.5, "the timer fired late"


async def _count_kind(app: App, ns: str, pid: str, kind: str, at_least: int) -> bool:
    return (await kinds(app, ns, pid)).count(kind) >= at_least


async def test_call_replaces_timer_and_unsets_it(app, ns, pdb):
    register(ns)
    async with app.running():
        await app.processes.init(ns, "p1", {"timer": 60})
        first = (await app.processes.get(ns, "p1")).timer
        await app.processes.call(ns, "p1", {"timer": 30})
        second = (await app.processes.get(ns, "p1")).timer
        assert second is not None and second.task_id != first.task_id and second.at < first.at
        # the replaced timer's job is canceled, its task cancelled
        assert await pdb.fetchval("SELECT status::text FROM dl_jobs WHERE job_id = $1", first.task_id) == "canceled"
        assert await pdb.fetchval("SELECT status FROM dl_process_tasks WHERE task_id = $1",
                                  first.task_id) == "cancelled"
        await app.processes.call(ns, "p1", {"unset": True})
        assert (await app.processes.get(ns, "p1")).timer is None
        assert await pdb.fetchval("SELECT count(*) FROM dl_jobs WHERE status = 'queued'") == 0


async def test_call_without_action_keeps_the_timer(app, ns):
    """Reschedule after a call: a call that does not touch the timer leaves it to fire."""
    register(ns)
    async with app.running():
        await app.processes.init(ns, "p1", {"timer": 0.8})
        await app.processes.call(ns, "p1", {"n": 1})
        await wait_until(lambda: _count_kind(app, ns, "p1", "timeout", 1), timeout=15)
    assert await kinds(app, ns, "p1") == ["init", "call", "timeout"]


async def test_call_with_a_history_range(app, ns):
    register(ns)
    async with app.running():
        await app.processes.init(ns, "p1", {"extra": 9})  # events 1..10
        forward = await app.processes.call(ns, "p1", {}, range={"offset": 3, "limit": 4})
        assert (forward["history"], forward["first"], forward["last"]) == (4, 4, 7)
        backward = await app.processes.call(ns, "p1", {}, range={"limit": 2, "direction": "backward"})
        assert (backward["history"], backward["first"], backward["last"]) == (2, 11, 10)


async def test_get_pages_history_both_directions(app, ns):
    register(ns)
    async with app.running():
        await app.processes.init(ns, "p1", {"extra": 24})  # 25 events
    forward, seen = 0, []
    while True:
        page = (await app.processes.get(ns, "p1", HistoryRange(offset=forward, limit=10))).history
        if not page:
            break
        seen += [e.event_id for e in page]
        forward = page[-1].event_id
    assert seen == list(range(1, 26))
    backward, seen = 0, []
    while True:
        page = (await app.processes.get(ns, "p1", {"offset": backward, "limit": 7, "direction": "backward"})).history
        if not page:
            break
        seen += [e.event_id for e in page]
        backward = page[-1].event_id
        if backward == 1:
            break
    assert seen == list(range(25, 0, -1))


async def test_call_error_puts_process_in_error_then_repair(app, ns):
    """Repair after a call error: the caller gets the error, the process is in error (corrupted_by
    the call), a call now is a 409 naming the status, a repair brings it back."""
    register(ns)
    async with app.running():
        await app.processes.init(ns, "p1", {})
        with pytest.raises(ProcessTaskFailed, match="Boom: card declined"):
            await app.processes.call(ns, "p1", {"fail": "card declined"})
        process = await app.processes.get(ns, "p1")
        assert process.status is ProcessStatus.error and "card declined" in process.detail
        assert process.corrupted_by is not None
        with pytest.raises(ProcessWrongStatus, match="is error") as wrong:
            await app.processes.call(ns, "p1", {})
        assert wrong.value.status == "error"
        with pytest.raises(ProcessTaskFailed):
            await app.processes.repair(ns, "p1", {"fail": "still broken"})
        # a failed repair leaves it in error with its first cause: detail agrees with corrupted_by
        after = await app.processes.get(ns, "p1")
        assert after.status is ProcessStatus.error and after.detail == process.detail
        assert after.corrupted_by == process.corrupted_by
        # the trace is objects, as get() is: the failing call is the task corrupted_by names
        trace = await app.processes.trace(ns, "p1")
        assert all(isinstance(entry, TraceEntry) for entry in trace)
        assert [(entry.type, entry.status) for entry in trace] == [
            ("init", "finished"), ("call", "error"), ("repair", "error")]
        assert trace[1].task_id == after.corrupted_by and "still broken" in trace[2].error
        assert all(isinstance(event, Event) for entry in trace for event in entry.events) and trace[0].events
        assert trace[1]["status"] == "error" and trace[0].to_dict()["events"][0]["event_id"] == 1
        assert (await app.processes.repair(ns, "p1", {"n": 7}))["kind"] == "repair"
        process = await app.processes.get(ns, "p1")
        assert process.status is ProcessStatus.running and process.corrupted_by is None and process.detail is None
        with pytest.raises(ProcessWrongStatus):
            await app.processes.repair(ns, "p1", {})


async def test_a_call_queued_behind_a_failing_call_gets_the_wrong_status_409(app, ns, pdb):
    """The second call is accepted while the first runs (its task row is written), waits behind it,
    and when the first fails the process is in error: the second is refused 409, never run."""
    register(ns)
    hold = gate(f"{ns}:failing")
    async with app.running():
        await app.processes.init(ns, "p1", {})
        failing = asyncio.create_task(app.processes.call(ns, "p1", {"n": 1, "gate": f"{ns}:failing",
                                                                    "fail": "boom"}))
        await wait_until(lambda: started(ns, "call:1"), timeout=10, message="the failing call runs")
        second = asyncio.create_task(app.processes.call(ns, "p1", {"n": 2}))
        await wait_until(lambda: _calls_accepted(pdb, ns, 2), timeout=10, message="the second call is queued")
        assert not second.done()
        hold.set()
        with pytest.raises(ProcessWrongStatus, match="is error") as wrong:
            await second
        assert wrong.value.status == "error"
        with pytest.raises(ProcessTaskFailed, match="boom"):
            await failing
    assert STEPS[ns][-2:] == [("start", "call:1"), ("end", "call:1")]  # the second never ran


async def _calls_accepted(pdb, ns: str, count: int) -> bool:
    return await pdb.fetchval("SELECT count(*) FROM dl_process_tasks WHERE ns = $1 AND task_type = 'call'",
                              ns) >= count


async def test_init_error_leaves_process_in_error(app, ns):
    register(ns)
    async with app.running():
        with pytest.raises(ProcessTaskFailed, match="no"):
            await app.processes.init(ns, "p1", {"fail": "no"})
        assert await status(app, ns, "p1") == "error"
        with pytest.raises(ProcessExists):
            await app.processes.init(ns, "p1", {})


async def test_timer_error_retried_then_succeeds(app, ns):
    register(ns)
    async with app.running():
        await app.processes.init(ns, "p1", {"timer": 0, "aux": {"timeout_fails": 2}})
        await wait_until(lambda: _count_kind(app, ns, "p1", "timeout", 1), timeout=15)
    process = await app.processes.get(ns, "p1")
    assert process.status is ProcessStatus.running
    assert process.history[-1].payload == {"kind": "timeout", "attempt": 3}


async def test_error_after_max_retries_then_simple_repair_reruns_the_timer(app, ns, pdb):
    register(ns)
    async with app.running():
        await app.processes.init(ns, "p1", {"timer": 0, "aux": {"timeout_fails": "always"}})
        await wait_until(lambda: _is(app, ns, "p1", "error"), timeout=15)
        process = await app.processes.get(ns, "p1")
        attempts = await pdb.fetchval("SELECT attempt FROM dl_jobs WHERE job_id = $1", process.corrupted_by)
        assert attempts == 3  # RetryPolicy.max_attempts
        assert "Boom" in process.detail and process.suspended_timer is not None
        # simple repair: no processor call, the failed timer task is scheduled again
        await pdb.execute("UPDATE dl_processes SET aux_state = '{\"timeout_fails\": 0}' WHERE ns = $1", ns)
        repaired = await app.processes.simple_repair(ns, "p1")
        # the re-armed timer is due at once, so it may have fired before simple_repair read the process back
        assert repaired.status is ProcessStatus.running
        assert repaired.timer is not None or await _count_kind(app, ns, "p1", "timeout", 1)
        await wait_until(lambda: _count_kind(app, ns, "p1", "timeout", 1), timeout=15)
    assert await status(app, ns, "p1") == "running"


async def test_non_retryable_error_then_repair_rearms_the_timer(app, ns):
    register(ns, retry=RetryPolicy(initial_timeout=0.1, max_attempts=5, non_retryable_errors=("Boom",)))
    async with app.running():
        await app.processes.init(ns, "p1", {"timer": 0, "aux": {"timeout_fails": "always"}})
        await wait_until(lambda: _is(app, ns, "p1", "error"), timeout=15)
        # a repair that changes the state so the timer passes, and re-arms the broken timer
        await app.processes.repair(ns, "p1", {"aux": {"timeout_fails": 0}})
        await wait_until(lambda: _count_kind(app, ns, "p1", "timeout", 1), timeout=15)
    assert await kinds(app, ns, "p1") == ["init", "repair", "timeout"]


async def test_simple_repair_after_a_call_error_rearms_the_suspended_timer(app, ns):
    register(ns)
    async with app.running():
        await app.processes.init(ns, "p1", {"timer": 1.0})
        with pytest.raises(ProcessTaskFailed):
            await app.processes.call(ns, "p1", {"fail": "x"})
        process = await app.processes.get(ns, "p1")
        assert process.timer is None and process.suspended_timer is not None  # disarmed while in error
        with pytest.raises(ProcessWrongStatus):
            await app.processes.simple_repair(ns, "missing") if False else await app.processes.call(ns, "p1", {})
        await app.processes.simple_repair(ns, "p1")
        await wait_until(lambda: _count_kind(app, ns, "p1", "timeout", 1), timeout=15)


async def _is(app: App, ns: str, pid: str, wanted: str) -> bool:
    return await status(app, ns, pid) == wanted


async def test_remove_by_timer_and_without_timer(app, ns, pdb):
    register(ns)
    async with app.running():
        await app.processes.init(ns, "p1", {"remove_in": 0.3})
        assert (await app.processes.get(ns, "p1")).timer.type == "remove"
        await wait_until(lambda: _gone(app, ns, "p1"), timeout=15)
        await app.processes.init(ns, "p2", {"timer": 60})
        await app.processes.remove(ns, "p2")
        with pytest.raises(ProcessNotFound):
            await app.processes.get(ns, "p2")
        with pytest.raises(ProcessNotFound):
            await app.processes.remove(ns, "p2")
    assert await pdb.fetchval("SELECT count(*) FROM dl_process_events") == 0
    assert await pdb.fetchval("SELECT count(*) FROM dl_process_tasks") == 0
    assert await pdb.fetchval("SELECT count(*) FROM dl_jobs WHERE status = 'queued'") == 0


async def _gone(app: App, ns: str, pid: str) -> bool:
    try:
        await app.processes.get(ns, pid)
    except ProcessNotFound:
        return True
    return False


async def test_concurrent_calls_are_serialized_and_answered_once_in_order(app, ns, pdb):
    register(ns, concurrency=8)
    async with app.running():
        await app.processes.init(ns, "p1", {})
        calls = []
        for n in range(20):
            calls.append(asyncio.create_task(app.processes.call(ns, "p1", {"n": n, "sleep": 0.01})))
            # arrival order: this call's task is in the queue before the next call is made
            await wait_until(lambda n=n: _tasks_at_least(pdb, n + 2), timeout=10, interval=0.001)
        responses = await asyncio.gather(*calls)
    assert [r["n"] for r in responses] == list(range(20))
    ns_of_calls = [e.payload["n"] for e in (await app.processes.get(ns, "p1")).history[1:]]
    assert ns_of_calls == list(range(20)), "calls ran out of arrival order"
    # one running task per process, always: no two jobs of the key overlapped
    rows = await pdb.fetch("SELECT started_at, finished_at FROM dl_jobs WHERE lock_key = $1 ORDER BY started_at",
                           f"process:{ns}:p1")
    for earlier, later in itertools.pairwise(rows):
        assert earlier["finished_at"] <= later["started_at"]


async def _tasks_at_least(pdb, count: int) -> bool:
    return await pdb.fetchval("SELECT count(*) FROM dl_process_tasks") >= count


async def test_postponed_call_waits_behind_a_running_task(app, ns, pdb):
    """A call made while another runs is accepted at once, waits, and starts only after the first
    ended: the processor's own steps show start 1, end 1, start 2, end 2 (order, no overlap)."""
    register(ns)
    hold = gate(f"{ns}:slow")
    async with app.running():
        await app.processes.init(ns, "p1", {})
        slow = asyncio.create_task(app.processes.call(ns, "p1", {"n": 1, "gate": f"{ns}:slow"}))
        await wait_until(lambda: started(ns, "call:1"), timeout=10, message="the first call runs")
        fast = asyncio.create_task(app.processes.call(ns, "p1", {"n": 2}))
        await wait_until(lambda: _calls_accepted(pdb, ns, 2), timeout=10, message="the second call is queued")
        assert not fast.done() and not started(ns, "call:2")
        hold.set()
        assert (await fast)["n"] == 2 and (await slow)["n"] == 1
    assert STEPS[ns] == [("start", "init:None"), ("end", "init:None"), ("start", "call:1"), ("end", "call:1"),
                         ("start", "call:2"), ("end", "call:2")]
    assert await kinds(app, ns, "p1") == ["init", "call", "call"]


async def _timer_due(pdb, ns: str) -> bool:
    return await pdb.fetchval("SELECT available_at <= now() FROM dl_jobs WHERE job_id = (SELECT timer_task_id "
                              "FROM dl_processes WHERE ns = $1)", ns)


async def test_call_racing_a_timer_runs_first(app, ns, pdb):
    """A call queued while a due timer also waits runs first; the timer runs after (blocked, not
    lost) unless the call moved it."""
    register(ns)
    hold = gate(f"{ns}:slow")
    async with app.running():
        await app.processes.init(ns, "p1", {"timer": 60})
        slow = asyncio.create_task(app.processes.call(ns, "p1", {"n": 1, "gate": f"{ns}:slow"}))
        await wait_until(lambda: started(ns, "call:1"), timeout=10, message="the first call runs")
        # the timer becomes due while the first call runs, and a second call arrives after it
        await pdb.execute("UPDATE dl_jobs SET available_at = now() WHERE job_id = (SELECT timer_task_id "
                          "FROM dl_processes WHERE ns = $1)", ns)
        await wait_until(lambda: _timer_due(pdb, ns), timeout=5, message="the timer is due")
        second = asyncio.create_task(app.processes.call(ns, "p1", {"n": 2}))
        await wait_until(lambda: _calls_accepted(pdb, ns, 2), timeout=10, message="the second call is queued")
        assert not started(ns, "call:2") and not started(ns, "timeout:None")
        hold.set()
        await slow
        assert (await second)["n"] == 2
        await wait_until(lambda: _count_kind(app, ns, "p1", "timeout", 1), timeout=15)
    assert await kinds(app, ns, "p1") == ["init", "call", "call", "timeout"]
    assert [label for edge, label in STEPS[ns] if edge == "start"] == ["init:None", "call:1", "call:2", "timeout:None"]
    assert STEPS[ns] == [(edge, label) for label in ("init:None", "call:1", "call:2", "timeout:None")
                         for edge in ("start", "end")]  # one step at a time


async def test_idempotent_init_and_call(app, ns, pdb):
    register(ns)
    async with app.running():
        first = await app.processes.init(ns, "p1", {"n": 1}, idempotency_key="i-1")
        assert await app.processes.init(ns, "p1", {"n": 1}, idempotency_key="i-1") == first
        calls = await asyncio.gather(*(app.processes.call(ns, "p1", {"n": 5}, idempotency_key="c-1")
                                       for _ in range(5)))
        assert all(c == calls[0] for c in calls)
        with pytest.raises(IdempotencyConflict):
            await app.processes.call(ns, "p1", {}, idempotency_key="i-1")
    assert await kinds(app, ns, "p1") == ["init", "call"]
    assert await pdb.fetchval("SELECT count(*) FROM dl_process_tasks") == 2


async def test_a_slow_task_times_the_caller_out_and_goes_on(app, ns):
    register(ns)
    async with app.running():
        await app.processes.init(ns, "p1", {})
        with pytest.raises(ProcessTimeout):
            await app.processes.call(ns, "p1", {"n": 1, "sleep": 1.0}, idempotency_key="slow", timeout=0.2)
        # the same key waits for the task still in flight and gets its response
        assert (await app.processes.call(ns, "p1", {"n": 1, "sleep": 1.0}, idempotency_key="slow"))["n"] == 1


async def test_list_with_cursor_and_status(app, ns):
    register(ns)
    async with app.running():
        for i in range(5):
            await app.processes.init(ns, f"p{i}", {})
        with pytest.raises(ProcessTaskFailed):
            await app.processes.call(ns, "p3", {"fail": "x"})
    page = await app.processes.list(ns, limit=2)
    ids = [p.id for p in page.processes]
    while page.next_cursor:
        page = await app.processes.list(ns, limit=2, cursor=page.next_cursor)
        ids += [p.id for p in page.processes]
    assert ids == [f"p{i}" for i in range(5)]
    assert [p.id for p in (await app.processes.list(ns, status="error")).processes] == ["p3"]


async def test_many_events_in_one_process(app, ns):
    """No cap on events: 10,000 events (bigint ids), read back by pages."""
    register(ns)
    async with app.running():
        await app.processes.init(ns, "p1", {"extra": 4999})
        response = await app.processes.call(ns, "p1", {"extra": 4999}, range={"limit": 1, "direction": "backward"})
        assert response["last"] == 5000
    process = await app.processes.get(ns, "p1", {"limit": 3, "direction": "backward"})
    assert process.last_event_id == 10_000 and [e.event_id for e in process.history] == [10_000, 9_999, 9_998]



async def test_step_logs_carry_the_namespace_and_process_id(app, ns, caplog):
    register(ns)
    caplog.set_level(logging.INFO, logger="dataloader.processes")
    async with app.running():
        await app.processes.init(ns, "p1", {})
        with pytest.raises(ProcessTaskFailed):
            await app.processes.call(ns, "p1", {"fail": "logged"})
    failed = [r for r in caplog.records if r.name == "dataloader.processes" and r.getMessage() == "process task failed"]
    assert failed and failed[0].ns == ns and failed[0].process_id == "p1" and "logged" in failed[0].error
    assert failed[0].task_type == "call"


async def test_simple_repair_after_a_non_retryable_timer_error(app, ns, pdb):
    register(ns, retry=RetryPolicy(initial_timeout=0.1, max_attempts=5, non_retryable_errors=(Boom,)))
    async with app.running():
        await app.processes.init(ns, "p1", {"timer": 0, "aux": {"timeout_fails": "always"}})
        await wait_until(lambda: _is(app, ns, "p1", "error"), timeout=15)
        broken = (await app.processes.get(ns, "p1")).corrupted_by
        assert await pdb.fetchval("SELECT attempt FROM dl_jobs WHERE job_id = $1", broken) == 1  # not retried
        await pdb.execute("UPDATE dl_processes SET aux_state = '{\"timeout_fails\": 0}' WHERE ns = $1", ns)
        await app.processes.simple_repair(ns, "p1")
        await wait_until(lambda: _count_kind(app, ns, "p1", "timeout", 1), timeout=15)
    assert await kinds(app, ns, "p1") == ["init", "timeout"]
