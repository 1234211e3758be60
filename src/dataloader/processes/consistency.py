"""The consistency check of a namespace (seed 002's Graph/Decision analysis): processes
whose state and tasks disagree, found and reported, and on request repaired.

What it finds (`decide`, a pure function of one process's facts):

- `orphan_task`: a task still `waiting` whose job is gone or ended; its caller waits forever and
  the process counts as busy. Repair: the task ends in `error` and its caller is answered.
- `lost_timer`: a running process's armed timer whose job is gone or ended, so it never fires.
  Repair: armed again, due at its time (now if past).
- `stuck_init`: a process in `init` with no init task left to run. Repair: to `error`, broken by
  its init task (then repair or restart it).
- `history_ahead`: events beyond `last_event_id`, so the next step's events would collide.
  Repair: `last_event_id` set to the last event.
- `history_missing`: `last_event_id` beyond the last event stored. Reported only.
- `cause_unknown`: in `error`, broken by a task that no longer exists. Reported only.
- `idle`: running, no timer, no task, unchanged for DL_PROCESS_IDLE_SEC: nothing will ever happen
  to it unless it is called. Reported only.

A repair runs per process in one transaction that holds the process's lock_key and row (so no
task of it runs meanwhile), re-reads its facts there, and writes with a compare-and-set on its
version; a process busy at that moment is reported, not repaired.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg

from dataloader import metrics
from dataloader.model.job import ACTIVE_STATUSES
from dataloader.processes.restart import KEY_WAIT_SEC, processor_of
from dataloader.processes.step import timer_job
from dataloader.storage.process_repository import ProcessRepository, dumps

LIVE_JOB = ACTIVE_STATUSES  # a waiting task whose job is one of these is not lost
REPAIRABLE = frozenset({"orphan_task", "lost_timer", "stuck_init", "history_ahead"})
MAX_CHECK_LIMIT = 1000


@dataclass(frozen=True, slots=True)
class Facts:
    """One process as the check reads it (check_facts.sql)."""

    id: str
    status: str
    version: int
    corrupted_by: uuid.UUID | None
    last_event_id: int
    updated_at: datetime
    timer_task_id: uuid.UUID | None
    timer_type: str | None
    timer_at: datetime | None
    timer_job_status: str | None
    max_event_id: int | None
    cause_known: bool
    init_task_id: uuid.UUID | None
    waiting_tasks: list[dict[str, Any]] = field(default_factory=list)

    @classmethod
    def from_row(cls, row: Any) -> Facts:
        return cls(id=row["id"], status=row["status"], version=row["version"], corrupted_by=row["corrupted_by"],
                   last_event_id=row["last_event_id"], updated_at=row["updated_at"],
                   timer_task_id=row["timer_task_id"], timer_type=row["timer_type"], timer_at=row["timer_at"],
                   timer_job_status=row["timer_job_status"], max_event_id=row["max_event_id"],
                   cause_known=row["cause_known"], init_task_id=row["init_task_id"],
                   waiting_tasks=list(row["waiting_tasks"] or []))


@dataclass(frozen=True, slots=True)
class Finding:
    process_id: str
    kind: str
    detail: str
    task_id: str | None = None
    repaired: bool = False

    @property
    def repairable(self) -> bool:
        return self.kind in REPAIRABLE

    def to_dict(self) -> dict[str, Any]:
        return {"process_id": self.process_id, "kind": self.kind, "detail": self.detail, "task_id": self.task_id,
                "repairable": self.repairable, "repaired": self.repaired}


@dataclass(frozen=True, slots=True)
class CheckPage:
    findings: list[Finding]
    examined: int
    next_cursor: str | None  # the last process id examined, when more may follow

    def to_dict(self) -> dict[str, Any]:
        return {"findings": [f.to_dict() for f in self.findings], "examined": self.examined,
                "next_cursor": self.next_cursor}


def decide(facts: Facts, now: datetime, idle_sec: float) -> list[Finding]:
    """Every way this process's state and tasks disagree (see the module's table)."""
    found: list[Finding] = []
    pid = facts.id
    orphans = [t for t in facts.waiting_tasks if t.get("job_status") not in LIVE_JOB]
    for task in orphans:
        found.append(Finding(pid, "orphan_task", f"{task['type']} task is waiting but its job is "
                                                 f"{task.get('job_status') or 'gone'}", str(task["task_id"])))
    live = [t for t in facts.waiting_tasks if t.get("job_status") in LIVE_JOB]
    if facts.status == "running" and facts.timer_task_id is not None and facts.timer_job_status not in LIVE_JOB:
        found.append(Finding(pid, "lost_timer", f"{facts.timer_type} timer due {_iso(facts.timer_at)} has no live "
                                                f"job (job {facts.timer_job_status or 'gone'})",
                             str(facts.timer_task_id)))
    if facts.status == "init" and not any(t["type"] == "init" for t in live):
        found.append(Finding(pid, "stuck_init", "in init with no init task left to run",
                             str(facts.init_task_id) if facts.init_task_id else None))
    top = facts.max_event_id or 0
    if top > facts.last_event_id:
        found.append(Finding(pid, "history_ahead",
                             f"events up to {top} stored, last_event_id is {facts.last_event_id}"))
    elif top < facts.last_event_id:
        found.append(Finding(pid, "history_missing", f"last_event_id is {facts.last_event_id}, events stored up to "
                                                     f"{top}"))
    if facts.status == "error" and facts.corrupted_by is not None and not facts.cause_known:
        found.append(Finding(pid, "cause_unknown", "broken by a task that no longer exists",
                             str(facts.corrupted_by)))
    if (idle_sec > 0 and facts.status == "running" and facts.timer_task_id is None and not facts.waiting_tasks
            and facts.updated_at < now - timedelta(seconds=idle_sec)):
        found.append(Finding(pid, "idle", f"no timer, no task and no change since {_iso(facts.updated_at)}"))
    return found


def _iso(value: datetime | None) -> str:
    return value.isoformat() if value is not None else "?"


async def check_page(pool: asyncpg.Pool, ns: str, *, after: str | None, limit: int, repair: bool,
                     idle_sec: float, default_lease_ttl_sec: int) -> CheckPage:
    """Check up to `limit` processes of `ns` after the id `after`; with `repair`, repair what can be."""
    rows = await ProcessRepository.check_facts(pool, ns, after, limit)
    now = datetime.now(UTC)
    findings: list[Finding] = []
    for row in rows:
        found = decide(Facts.from_row(row), now, idle_sec)
        if repair and any(f.repairable for f in found):
            found = await _repair(pool, ns, row["id"], idle_sec, default_lease_ttl_sec) or found
        for f in found:
            metrics.PROCESS_CHECK_FINDINGS.labels(ns, f.kind, str(f.repaired).lower()).inc()
        findings += found
    return CheckPage(findings, len(rows), rows[-1]["id"] if len(rows) == limit else None)


async def _repair(pool: asyncpg.Pool, ns: str, process_id: str, idle_sec: float,
                  default_lease_ttl_sec: int) -> list[Finding] | None:
    """Repair one process under its lock_key and row lock; None if it was busy (nothing written)."""
    repo = ProcessRepository(pool)
    async with pool.acquire() as conn, conn.transaction():
        if not await repo.take_process_key(conn, ns, process_id, KEY_WAIT_SEC):
            return None
        if await repo.lock_process(conn, ns, process_id) is None:
            return []
        facts = Facts.from_row((await repo.check_facts(conn, ns, None, 1, process_id))[0])
        found = decide(facts, datetime.now(UTC), idle_sec)
        repaired: list[Finding] = []
        new_status = detail = corrupted_by = None
        set_timer, timer = False, (None, None, None)
        last_event_id = None
        for f in found:
            if f.kind == "orphan_task":
                await repo.end_task(conn, uuid.UUID(f.task_id), "error",  # type: ignore[arg-type]
                                    f"ended by a consistency check: {f.detail}")
            elif f.kind == "lost_timer":
                processor, lease = processor_of(ns, default_lease_ttl_sec)
                due = max(facts.timer_at or datetime.now(UTC), datetime.now(UTC))
                job = timer_job(ns, process_id, facts.timer_type or "timeout", due, processor, lease)
                await repo.insert_task(conn, job)
                set_timer, timer = True, (job.task_id, job.type, due)
            elif f.kind == "stuck_init":
                new_status, corrupted_by = "error", facts.init_task_id
                detail = "init never completed (found by a consistency check); repair or restart it"
            elif f.kind == "history_ahead":
                last_event_id = facts.max_event_id
            repaired.append(Finding(f.process_id, f.kind, f.detail, f.task_id, f.repairable))
        payload = dumps({"repaired": [f.kind for f in repaired if f.repaired]})
        await repo.check_fix(conn, ns, process_id, facts.version, new_status, detail, corrupted_by, set_timer,
                             timer, last_event_id, payload)
        return repaired


__all__ = ["CheckPage", "Facts", "Finding", "check_page", "decide"]
