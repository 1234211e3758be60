"""Restart a process from its start or from a step (seed 002's "search and restart").

A restart puts the process back to the state a task found (`state_before`, kept by the statement
that applied the task's step: status, aux_state, metadata, last event, timer), deletes the events
written since, and queues that task again, followed by the `call`s that finished after it, in the
order they ran, as new tasks that name the ones they repeat (`restart_of`). The processor then
rebuilds what was lost from the same inputs, with its fixed code.

- From the start: the process's first `init` task (an imported process has none).
- From a task: any task that changed the process. A `timeout` is not queued again: its timer is
  restored, so it fires again (after the calls, which always go first).
- From an event: the task that wrote it (the whole task: its events are one step).
- From its error: the task that put the process in `error` (`corrupted_by`); this is what a bulk
  restart of the processes a bad deploy broke uses.

Consistency: the restart runs in one transaction holding the process's row lock and its lock_key
(so no task of it runs meanwhile, and none starts before it commits), and bumps `version`, which
fences off any step that read the process before. It refuses (ProcessBusy) while a task runs or a
caller's task waits in the queue, rather than reorder them.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal

import asyncpg

from dataloader import metrics
from dataloader.exceptions import InvalidProcessRequest, ProcessBusy, ProcessNotFound, RestartNotPossible
from dataloader.model.clock import iso
from dataloader.model.process import CALLER_PRIORITY, MAX_EVENT_ID, TaskType, Timer
from dataloader.processes.registry import Processor, processors
from dataloader.processes.step import timer_job
from dataloader.storage.db import parse_timestamptz_text
from dataloader.storage.process_repository import ProcessRepository, dumps, lock_key_of

# Attempts of a re-queued caller task's job (lease-expiry re-runs only), as for a caller's own.
REPLAY_MAX_ATTEMPTS = 10
# How long a restart waits for the process's lock_key when no task of it runs: the worker of a task
# that has just ended releases the key a few milliseconds after the finish commits.
KEY_WAIT_SEC = 2.0

RestartFrom = Literal["start", "error", "task", "event"]


@dataclass(frozen=True, slots=True)
class RestartPoint:
    """Where a restart goes back to: `start`, `error`, or a given `task` id or `event` id."""

    kind: RestartFrom
    task_id: uuid.UUID | None = None
    event_id: int | None = None

    @classmethod
    def of(cls, from_: str | None = None, *, task_id: Any = None, event_id: Any = None) -> RestartPoint:
        given = [name for name, value in (("from", from_), ("from_task", task_id), ("from_event", event_id))
                 if value is not None]
        if len(given) != 1:
            raise InvalidProcessRequest("say where to restart from: exactly one of from ('start' or 'error'), "
                                        "from_task (a task id) or from_event (an event id)")
        if from_ is not None:
            if from_ not in ("start", "error"):
                raise InvalidProcessRequest("from must be 'start' or 'error' (or give from_task / from_event)")
            return cls(from_)  # type: ignore[arg-type]
        if task_id is not None:
            try:
                return cls("task", task_id=task_id if isinstance(task_id, uuid.UUID) else uuid.UUID(str(task_id)))
            except ValueError:
                raise InvalidProcessRequest("from_task must be a task id (a UUID)") from None
        if isinstance(event_id, bool) or not isinstance(event_id, int) or not 1 <= event_id <= MAX_EVENT_ID:
            raise InvalidProcessRequest("from_event must be an event id (an integer >= 1)")
        return cls("event", event_id=event_id)

    def to_dict(self) -> dict[str, Any]:
        if self.kind == "task":
            return {"from_task": str(self.task_id)}
        if self.kind == "event":
            return {"from_event": self.event_id}
        return {"from": self.kind}


@dataclass(frozen=True, slots=True)
class RestartResult:
    ns: str
    id: str
    task_id: uuid.UUID  # the task it went back to
    task_type: str
    status: str  # the process's status after the restart
    removed_events: int
    queued: list[uuid.UUID]  # the new tasks, in the order they run
    timer: Timer | None

    def to_dict(self) -> dict[str, Any]:
        return {"ns": self.ns, "id": self.id, "from_task": str(self.task_id), "from_type": self.task_type,
                "status": self.status, "removed_events": self.removed_events,
                "queued_tasks": [str(t) for t in self.queued],
                "timer": None if self.timer is None else {
                    "type": self.timer.type, "at": iso(self.timer.at), "armed": self.timer.task_id is not None}}


def processor_of(ns: str, default_lease_ttl_sec: int) -> tuple[Processor, int]:
    """The namespace's processor settings for the jobs a restart queues. A node without the
    processor (a bulk operation's runner may be any node) uses the defaults a registration has."""
    processor = processors.get(ns) or Processor(ns=ns, func=_not_here, is_async=True)
    return processor, processor.lease_ttl_sec or default_lease_ttl_sec


def _not_here(*_: Any) -> None:  # pragma: no cover - never called: only the job settings are read
    raise RuntimeError("placeholder processor")


async def restart_in(conn: asyncpg.Connection, repo: ProcessRepository, ns: str, process_id: str,
                     point: RestartPoint, *, default_lease_ttl_sec: int) -> RestartResult:
    """Restart one process inside the caller's transaction (see the module's rules)."""
    if not await repo.take_process_key(conn, ns, process_id, KEY_WAIT_SEC):
        raise ProcessBusy(f"a task of process {process_id!r} is running; restart it when the task has ended")
    lock = await repo.restart_lock(conn, ns, process_id)
    if lock is None:
        raise ProcessNotFound(f"no process {process_id!r} in namespace {ns!r}")
    stored, caller_waiting = lock
    process = stored.process
    if caller_waiting:
        raise ProcessBusy(f"a caller's task of process {process_id!r} waits in the queue; restart it when "
                          "that task has ended")
    task_id = point.task_id
    if point.kind == "error":
        if process.corrupted_by is None:
            raise RestartNotPossible(f"process {process_id!r} is {process.status.value}, not broken by a task; "
                                     "restart it from its start, a task or an event")
        task_id = process.corrupted_by
    row = await repo.restart_point(conn, ns, process_id, task_id, point.event_id)
    if row["task_id"] is None:
        raise _no_point(point, process_id, bool(row["event_found"]))
    snapshot = row["state_before"]
    override = None
    if snapshot is None and row["task_type"] == TaskType.init.value:
        # An init found what every process starts from; one that ran before migration 0016 did not
        # keep it, so it is written out here.
        snapshot = {"status": "init", "detail": None, "corrupted_by": None, "aux_state": None,
                    "aux_state_bytes": None, "metadata": {}, "last_event_id": 0, "timer_type": None,
                    "timer_at": None, "timer_armed": False}
        override = dumps(snapshot)
    if snapshot is None:
        raise RestartNotPossible(
            f"task {row['task_id']} ({row['task_type']}, {row['status']}) never changed process {process_id!r}, "
            "so it kept no state to go back to; restart from another task")
    if row["task_type"] == TaskType.remove.value:
        raise RestartNotPossible("a remove task cannot be restarted from")
    processor, lease = processor_of(ns, default_lease_ttl_sec)

    armed = process.timer
    if armed is not None:
        await repo.cancel_timer(conn, armed.task_id, "process restarted")  # type: ignore[arg-type]
    timer = None
    if snapshot.get("timer_type") and snapshot.get("timer_at"):
        at = parse_timestamptz_text(snapshot["timer_at"])  # may be 'infinity' in a hand-written row
        if snapshot.get("timer_armed"):
            due = max(at, datetime.now(UTC))
            job = timer_job(ns, process_id, snapshot["timer_type"], due, processor, lease)
            await repo.insert_task(conn, job)
            timer = Timer(snapshot["timer_type"], due, job.task_id)
        else:  # suspended by the error the process was in: a repair re-arms it
            timer = Timer(snapshot["timer_type"], at, None)

    replays: list[tuple[uuid.UUID, str, Any, Any]] = []
    if row["task_type"] != TaskType.timeout.value:  # a timeout runs again from its restored timer
        replays.append((row["task_id"], row["task_type"], row["args"], row["history_range"]))
    replays += [(r["task_id"], r["task_type"], r["args"], r["history_range"])
                for r in await repo.restart_replays(conn, ns, process_id, row["task_id"])]
    new_ids = [uuid.uuid4() for _ in replays]
    if replays:
        await repo.insert_replays(conn, ns, process_id, new_ids, [r[1] for r in replays],
                                  [dumps(r[2]) for r in replays],
                                  [None if r[3] is None else dumps(r[3]) for r in replays],
                                  [r[0] for r in replays], processor.queue, lock_key_of(ns, process_id),
                                  CALLER_PRIORITY, REPLAY_MAX_ATTEMPTS, lease)
    feed = {**point.to_dict(), "task_id": str(row["task_id"]), "task_type": row["task_type"],
            "queued_tasks": [str(t) for t in new_ids]}
    status, removed = await repo.restart_apply(conn, ns, process_id, row["task_id"], timer, dumps(feed), override)
    return RestartResult(ns, process_id, row["task_id"], row["task_type"], status, removed, new_ids, timer)


def restart_params(params: Any) -> RestartPoint:
    """The params of a bulk restart: {"from": "start" | "error"} or {"from_event": n} (a task id is
    one process's; it makes no sense across many)."""
    if not isinstance(params, dict) or not params or set(params) - {"from", "from_event"}:
        raise InvalidProcessRequest('process_restart needs params {"from": "start" | "error"} or {"from_event": n}')
    return RestartPoint.of(params.get("from"), event_id=params.get("from_event"))


def bulk_restarter(default_lease_ttl_sec: int) -> Callable[[asyncpg.Connection, str, str, dict[str, Any]],
                                                          Awaitable[bool]]:
    """What a bulk process_restart operation applies to each process, in its batch's transaction."""

    async def restart_one(conn: asyncpg.Connection, ns: str, process_id: str, params: dict[str, Any]) -> bool:
        point = restart_params(params)
        started = time.perf_counter()
        await restart_in(conn, ProcessRepository(conn), ns, process_id, point,
                         default_lease_ttl_sec=default_lease_ttl_sec)
        metrics.PROCESS_RESTARTS.labels(ns, point.kind).inc()
        metrics.PROCESS_RESTART_SECONDS.labels(ns).observe(time.perf_counter() - started)
        return True

    return restart_one


def _no_point(point: RestartPoint, process_id: str, event_found: bool) -> Exception:
    if point.kind == "start":
        return RestartNotPossible(f"process {process_id!r} has no init task (it was imported); "
                                  "restart it from one of its tasks")
    if point.kind == "event":
        if event_found:
            return RestartNotPossible(f"event {point.event_id} of process {process_id!r} was imported, not "
                                      "written by a task; restart from its start or a later task")
        return ProcessNotFound(f"process {process_id!r} has no event {point.event_id}")
    return ProcessNotFound(f"process {process_id!r} has no task {point.task_id}")


__all__ = ["RestartPoint", "RestartResult", "bulk_restarter", "restart_in", "restart_params"]
