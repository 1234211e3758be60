"""The consistency check (issue 11): each disagreement between a process's state and its tasks is
found, reported, and repaired when asked (against a real PostgreSQL, the faults made by hand as a
crash or a bad restore would leave them); and `decide`'s rules as fast unit tests."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import pytest

from dataloader.exceptions import InvalidCursor, InvalidProcessRequest
from dataloader.processes.consistency import Facts, decide
from tests.conftest import wait_until
from tests.processes.processors import register

NOW = datetime(2030, 1, 1, tzinfo=UTC)


def facts(**changes) -> Facts:
    values = dict(id="p", status="running", version=3, corrupted_by=None, last_event_id=2, updated_at=NOW,
                  timer_task_id=None, timer_type=None, timer_at=None, timer_job_status=None, max_event_id=2,
                  cause_known=False, init_task_id=uuid.uuid4(), waiting_tasks=[])
    values.update(changes)
    return Facts(**values)


def kinds(f: Facts, idle_sec: float = 3600) -> list[str]:
    return [finding.kind for finding in decide(f, NOW, idle_sec)]


def test_a_consistent_process_has_no_findings():
    assert kinds(facts()) == []
    assert kinds(facts(timer_task_id=uuid.uuid4(), timer_type="timeout", timer_at=NOW, timer_job_status="queued")) == []
    assert kinds(facts(status="init", waiting_tasks=[{"task_id": "t", "type": "init", "job_status": "running"}])) == []
    assert kinds(facts(status="error", corrupted_by=uuid.uuid4(), cause_known=True)) == []


def test_each_disagreement_is_found():
    gone = {"task_id": "t", "type": "call", "job_status": None}
    assert kinds(facts(waiting_tasks=[gone])) == ["orphan_task"]
    assert kinds(facts(timer_task_id=uuid.uuid4(), timer_type="timeout", timer_at=NOW,
                       timer_job_status="succeeded")) == ["lost_timer"]
    assert kinds(facts(status="init", waiting_tasks=[{**gone, "type": "init", "job_status": "failed"}])) == [
        "orphan_task", "stuck_init"]
    assert kinds(facts(max_event_id=5)) == ["history_ahead"]
    assert kinds(facts(max_event_id=None)) == ["history_missing"]
    assert kinds(facts(status="error", corrupted_by=uuid.uuid4(), cause_known=False)) == ["cause_unknown"]


def test_idle_needs_no_timer_no_task_and_an_old_change():
    old = NOW - timedelta(hours=2)
    assert kinds(facts(updated_at=old)) == ["idle"]
    assert kinds(facts(updated_at=old), idle_sec=0) == []  # 0: never idle
    assert kinds(facts(updated_at=NOW - timedelta(minutes=59))) == []
    assert kinds(facts(updated_at=old, timer_task_id=uuid.uuid4(), timer_job_status="queued",
                       timer_type="timeout", timer_at=NOW)) == []
    assert kinds(facts(updated_at=old, status="error")) == []


async def test_check_finds_and_repairs_what_a_crash_or_restore_left(app, ns, pdb):
    register(ns)
    async with app.running():
        for pid in ("ok", "orphan", "timer", "ahead", "init"):
            await app.processes.init(ns, pid, {"n": 1, **({"timer": 3600} if pid == "timer" else {})})
        # the faults, as a bad restore or a lost write would leave them
        orphan = uuid.uuid4()
        await pdb.execute("INSERT INTO dl_process_tasks (task_id, ns, process_id, task_type, args) "
                          "VALUES ($1, $2, 'orphan', 'call', '{}')", orphan, ns)
        lost = await pdb.fetchval("SELECT timer_task_id FROM dl_processes WHERE ns = $1 AND id = 'timer'", ns)
        await pdb.execute("DELETE FROM dl_jobs WHERE job_id = $1", lost)
        await pdb.execute("UPDATE dl_processes SET last_event_id = 0 WHERE ns = $1 AND id = 'ahead'", ns)
        await pdb.execute("UPDATE dl_processes SET status = 'init' WHERE ns = $1 AND id = 'init'", ns)

        report = await app.processes.check(ns)
        found = {(f.process_id, f.kind, f.repaired) for f in report.findings}
        assert found == {("orphan", "orphan_task", False), ("timer", "lost_timer", False),
                         ("timer", "orphan_task", False),  # the timer's own task waits on the lost job
                         ("ahead", "history_ahead", False), ("init", "stuck_init", False)}
        assert report.examined == 5 and report.next_cursor is None

        repaired = await app.processes.check(ns, repair=True)
        assert {(f.process_id, f.kind, f.repaired) for f in repaired.findings} == {
            (pid, kind, True) for pid, kind, _ in found}
        assert (await app.processes.check(ns)).findings == []
        # repaired for real: the timer has a live job again, the next call's event id is free, the
        # orphan's caller would get an answer, the stuck one can be restarted from its init
        row = await pdb.fetchrow("SELECT p.timer_task_id, j.status::text AS job FROM dl_processes p "
                                 "JOIN dl_jobs j ON j.job_id = p.timer_task_id WHERE p.ns = $1 AND p.id = 'timer'", ns)
        assert row["timer_task_id"] != lost and row["job"] == "queued"
        assert (await app.processes.call(ns, "ahead", {"n": 2}))["last"] == 1
        assert await pdb.fetchval("SELECT status FROM dl_process_tasks WHERE task_id = $1", orphan) == "error"
        assert (await app.processes.get(ns, "init")).status.value == "error"
        await app.processes.restart(ns, "init", "error")
        await wait_until(lambda: pdb.fetchval(
            "SELECT status = 'running' FROM dl_processes WHERE ns = $1 AND id = 'init'", ns), message="restarted init")


async def test_check_pages_and_reports_idle_processes(app, ns, pdb):
    register(ns)
    async with app.running():
        for n in range(5):
            await app.processes.init(ns, f"p{n}", {"n": n})
    await pdb.execute("UPDATE dl_processes SET updated_at = now() - interval '2 days' WHERE ns = $1 AND id < 'p2'", ns)
    first = await app.processes.check(ns, limit=3)
    assert first.examined == 3 and first.next_cursor is not None
    second = await app.processes.check(ns, limit=3, cursor=first.next_cursor)
    assert second.examined == 2 and second.next_cursor is None
    assert sorted(f.process_id for f in first.findings + second.findings if f.kind == "idle") == ["p0", "p1"]
    await app.processes.refresh_metrics()
    from dataloader import metrics

    assert metrics.PROCESSES_IDLE.labels(ns)._value.get() == 2
    for bad in ({"limit": 0}, {"limit": 10**6}, {"limit": True}):
        with pytest.raises(InvalidProcessRequest):
            await app.processes.check(ns, **bad)
    with pytest.raises(InvalidCursor):
        await app.processes.check(ns, cursor="not-a-cursor")
    with pytest.raises(InvalidProcessRequest):
        await app.processes.check("bad ns!")
