"""SQL of processes (`queries/processes/*.sql`), returning typed values (`Process`, `Event`,
`TaskRecord`). Statements that must commit together take the caller's connection (`conn`), so the
service and the step decide where a transaction begins and ends."""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import asyncpg

from dataloader.model import payload_crypto
from dataloader.model.clock import iso
from dataloader.model.payload_crypto import reveal, seal_text
from dataloader.model.process import Event, HistoryRange, Process, ProcessStatus, Timer
from dataloader.storage.db import parse_timestamptz_text
from dataloader.storage.executor import Executor
from dataloader.storage.queries import sql

PROCESS_TASK = "dl.process"


def lock_key_of(ns: str, process_id: str) -> str:
    """The lock_key of every task of a process: one holder at a time on any number of nodes."""
    return f"process:{ns}:{process_id}"


def dumps(value: Any) -> str:
    return json.dumps(value, allow_nan=False, ensure_ascii=False)


@dataclass(frozen=True, slots=True)
class TaskRecord:
    task_id: uuid.UUID
    ns: str
    process_id: str
    type: str
    args: Any
    history_range: Any
    idempotency_key: str | None
    status: str
    response: Any
    error: str | None
    scheduled_at: datetime
    created_at: datetime
    finished_at: datetime | None
    job_status: str | None = None
    attempt: int | None = None
    started_at: datetime | None = None
    restart_of: uuid.UUID | None = None  # the task this one runs again (a restart queued it)

    @classmethod
    def from_row(cls, row: Any) -> TaskRecord:
        return cls(task_id=row["task_id"], ns=row["ns"], process_id=row["process_id"], type=row["task_type"],
                   args=row["args"], history_range=row["history_range"], idempotency_key=row["idempotency_key"],
                   status=row["status"], response=row["response"], error=row["error"],
                   scheduled_at=row["scheduled_at"], created_at=row["created_at"], finished_at=row["finished_at"],
                   job_status=row["job_status"], attempt=row["attempt"], started_at=row["started_at"],
                   restart_of=row["restart_of"])

    def to_dict(self) -> dict[str, Any]:
        return {
            "task_id": str(self.task_id), "type": self.type, "args": self.args, "status": self.status,
            "idempotency_key": self.idempotency_key, "response": self.response, "error": self.error,
            "scheduled_at": iso(self.scheduled_at), "created_at": iso(self.created_at),
            "started_at": iso(self.started_at) if self.started_at else None,
            "finished_at": iso(self.finished_at) if self.finished_at else None,
            "attempts": self.attempt, "job_status": self.job_status,
            "restart_of": str(self.restart_of) if self.restart_of else None,
        }


@dataclass(frozen=True, slots=True)
class ProcessRow:
    """A process as stored, with the bookkeeping a step needs (`version`)."""

    process: Process
    version: int


def process_from_row(row: Any, history: list[Event] | None = None) -> ProcessRow:
    aux = row["aux_state_bytes"] if row["aux_state_bytes"] is not None else row["aux_state"]
    timer = suspended = None
    if row["timer_type"] is not None and row["timer_at"] is not None:
        if row["timer_task_id"] is not None:
            timer = Timer(row["timer_type"], row["timer_at"], row["timer_task_id"])
        else:
            suspended = Timer(row["timer_type"], row["timer_at"], None)
    previous = row["previous_status"]
    process = Process(
        ns=row["ns"], id=row["id"], status=ProcessStatus(row["status"]), detail=row["detail"], aux_state=aux,
        metadata=row["metadata"], corrupted_by=row["corrupted_by"],
        previous_status=ProcessStatus(previous) if previous else None, status_changed_at=row["status_changed_at"],
        created_at=row["created_at"], last_event_id=row["last_event_id"], history=history or [], timer=timer,
        suspended_timer=suspended)
    return ProcessRow(process, row["version"])


def _sealed(payloads: Sequence[str]) -> list[str]:
    """Events' payloads (JSON text) as stored: each its own envelope with DL_ENCRYPTION_KEYS."""
    if payload_crypto.active() is None:
        return list(payloads)
    return [seal_text(p) or p for p in payloads]


def events_from_json(items: list[Any]) -> list[Event]:
    """The history aggregated by load_step.sql: [event_id, ts, payload, metadata, task_id] each."""
    # an aggregate's payloads are nested in its JSON: the codec opened none of them
    return [Event(event_id=i[0], timestamp=parse_timestamptz_text(i[1]), payload=reveal(i[2]), metadata=i[3],
                  task_id=uuid.UUID(i[4]) if i[4] else None) for i in items]


def event_from_row(row: Any) -> Event:
    return Event(event_id=row["event_id"], timestamp=row["ts"], payload=row["payload"], metadata=row["metadata"],
                 task_id=row["task_id"])


@dataclass(frozen=True, slots=True)
class NewTask:
    task_id: uuid.UUID
    ns: str
    process_id: str
    type: str
    args_json: str
    queue: str
    priority: int
    max_attempts: int
    lease_ttl_sec: int
    history_range_json: str | None = None
    idempotency_key: str | None = None
    due_at: datetime | None = None
    producer: str | None = None
    request_id: str | None = None
    traceparent: str | None = None  # the caller's span, W3C (0020; None: not traced)
    # A span that caused the task without being its parent (the step that armed a timer): its first
    # attempt links to it (written as the job's attempt_span, 0021; None: none)
    cause_span: str | None = None


@dataclass(frozen=True, slots=True)
class StepWrite:
    """The writes of one step (apply_step.sql)."""

    status: str
    detail: str | None
    corrupted_by: uuid.UUID | None
    timer: Timer | None  # armed (task_id set) or suspended (task_id None), or none
    task_status: str = "finished"
    task_error: str | None = None
    response_json: str | None = None
    aux_set: bool = False
    aux_json: str | None = None
    aux_bytes: bytes | None = None
    metadata_set: bool = False
    metadata_json: str | None = None
    event_payloads: tuple[str, ...] = ()
    event_metadata: tuple[str | None, ...] = ()
    lifecycle: tuple[str, ...] = ()
    lifecycle_json: str | None = None


class ProcessRepository:
    def __init__(self, pool: asyncpg.Pool) -> None:
        self.pool = pool

    # -- creating ----------------------------------------------------------------------------------

    @staticmethod
    async def insert_task(conn: asyncpg.Connection, task: NewTask) -> bool:
        """False: the idempotency key already names a task (nothing inserted)."""
        row = await conn.fetchrow(
            sql("processes/insert_task"), task.task_id, task.ns, task.process_id, task.type, seal_text(task.args_json),
            task.history_range_json, task.idempotency_key, task.due_at, task.queue,
            lock_key_of(task.ns, task.process_id), task.priority, task.max_attempts, task.lease_ttl_sec,
            task.producer, task.request_id, task.traceparent, task.cause_span)
        return row is not None

    @staticmethod
    async def enqueue_caller(conn: Any, task: NewTask, needed_status: str | None) -> asyncpg.Record:
        """One statement: (status found, process created, task queued); see enqueue_caller.sql."""
        return await conn.fetchrow(
            sql("processes/enqueue_caller"), task.task_id, task.ns, task.process_id, task.type,
            seal_text(task.args_json), task.history_range_json, task.idempotency_key, task.queue,
            lock_key_of(task.ns, task.process_id),
            task.priority, task.max_attempts, task.lease_ttl_sec, task.producer, task.request_id, needed_status,
            task.traceparent)

    # -- reading -----------------------------------------------------------------------------------

    async def get_task(self, task_id: uuid.UUID) -> TaskRecord | None:
        row = await self.pool.fetchrow(sql("processes/get_task"), task_id)
        return None if row is None else TaskRecord.from_row(row)

    @staticmethod
    async def get_task_by_key(ns: str, key: str, on: Executor) -> TaskRecord | None:
        """The task the idempotency key names, read on `on` (an enqueue's own transaction)."""
        row = await on.fetchrow(sql("processes/get_task_by_key"), ns, key)
        return None if row is None else TaskRecord.from_row(row)

    async def get_process(self, ns: str, process_id: str) -> ProcessRow | None:
        row = await self.pool.fetchrow(sql("processes/get_process"), ns, process_id)
        return None if row is None else process_from_row(row)

    @staticmethod
    async def lock_process(conn: asyncpg.Connection, ns: str, process_id: str) -> ProcessRow | None:
        row = await conn.fetchrow(sql("processes/lock_process"), ns, process_id)
        return None if row is None else process_from_row(row)

    async def events(self, ns: str, process_id: str, history: HistoryRange) -> list[Event]:
        if history.direction == "backward":
            rows = await self.pool.fetch(sql("processes/events_backward"), ns, process_id, history.offset,
                                         history.limit)
        else:
            rows = await self.pool.fetch(sql("processes/events_forward"), ns, process_id, history.offset, history.limit)
        return [event_from_row(r) for r in rows]

    async def list_tasks(self, ns: str, process_id: str) -> list[TaskRecord]:
        return [TaskRecord.from_row(r) for r in await self.pool.fetch(sql("processes/list_tasks"), ns, process_id)]

    async def load_step(self, task_id: uuid.UUID, lock_key: str, caller_priority: int) -> asyncpg.Record | None:
        return await self.pool.fetchrow(sql("processes/load_step"), task_id, lock_key, caller_priority)

    async def was_reaped(self, job_id: uuid.UUID) -> bool:
        return bool(await self.pool.fetchval(sql("processes/was_reaped"), job_id))

    async def list_processes(self, ns: str, status: str | None, after: str | None, limit: int) -> list[Process]:
        rows = await self.pool.fetch(sql("processes/list_processes"), ns, status, after, limit)
        return [process_from_row(r).process for r in rows]

    async def count_by_status(self, idle_sec: float = 0) -> list[asyncpg.Record]:
        return await self.pool.fetch(sql("processes/count_by_status"), float(idle_sec))

    # -- writing -----------------------------------------------------------------------------------

    @staticmethod
    async def cancel_timer(conn: asyncpg.Connection, task_id: uuid.UUID, reason: str) -> bool:
        return bool(await conn.fetchval(sql("processes/cancel_timer"), task_id, reason))

    @staticmethod
    async def apply_step(conn: asyncpg.Connection, ns: str, process_id: str, task_id: uuid.UUID, version: int,
                         w: StepWrite) -> bool:
        timer = w.timer
        row = await conn.fetchrow(
            sql("processes/apply_step"), ns, process_id, task_id, version, w.status, w.aux_set, seal_text(w.aux_json),
            w.aux_bytes, w.metadata_set, w.metadata_json, _sealed(w.event_payloads), list(w.event_metadata),
            seal_text(w.response_json), w.task_status, w.task_error, w.detail, w.corrupted_by,
            timer.task_id if timer else None, timer.type if timer else None, timer.at if timer else None,
            list(w.lifecycle), w.lifecycle_json)
        return bool(row["applied"])

    @staticmethod
    async def end_task(conn: Any, task_id: uuid.UUID, status: str, error: str | None,
                       response_json: str | None = None) -> bool:
        return bool(await conn.fetchval(sql("processes/end_task"), task_id, status, error, seal_text(response_json)))

    @staticmethod
    async def delete_process(ns: str, process_id: str, on: Executor, task_id: uuid.UUID | None = None) -> bool:
        """Delete the process and its rows on `on` (the pool, or a process step's transaction, whose
        task `task_id` is then spared the cancel)."""
        row = await on.fetchrow(sql("processes/delete_process"), ns, process_id, lock_key_of(ns, process_id), task_id)
        return bool(row["removed"])

    @staticmethod
    async def simple_repair(conn: asyncpg.Connection, ns: str, process_id: str, version: int,
                            timer: Timer | None) -> bool:
        return bool(await conn.fetchval(
            sql("processes/simple_repair"), ns, process_id, version, timer.task_id if timer else None,
            timer.type if timer else None, timer.at if timer else None))

    # -- restart (processes/restart.py) ---------------------------------------------------------------

    @staticmethod
    async def take_process_key(conn: asyncpg.Connection, ns: str, process_id: str, wait_sec: float) -> bool:
        """Take the process's lock_key until the transaction ends; False if a task of it runs or the
        key stays held for `wait_sec` (nothing is taken then). Inside a savepoint, so a lock
        timeout leaves the caller's transaction usable."""
        previous = await conn.fetchval("SELECT current_setting('lock_timeout')")
        await conn.execute("SELECT set_config('lock_timeout', $1, true)", f"{int(wait_sec * 1000)}ms")
        try:
            async with conn.transaction():
                row = await conn.fetchrow(sql("processes/restart_key"), lock_key_of(ns, process_id))
        except (asyncpg.LockNotAvailableError, asyncpg.DeadlockDetectedError):
            return False
        finally:
            await conn.execute("SELECT set_config('lock_timeout', $1, true)", previous)
        return not row["running"]

    @staticmethod
    async def restart_lock(conn: asyncpg.Connection, ns: str, process_id: str) -> tuple[ProcessRow, bool] | None:
        """The process row-locked, and whether a caller's task waits; None: no such process."""
        row = await conn.fetchrow(sql("processes/restart_lock"), ns, process_id)
        return None if row is None else (process_from_row(row), row["caller_waiting"])

    @staticmethod
    async def restart_point(conn: asyncpg.Connection, ns: str, process_id: str, task_id: uuid.UUID | None,
                            event_id: int | None) -> asyncpg.Record:
        return await conn.fetchrow(sql("processes/restart_point"), ns, process_id, task_id, event_id)

    @staticmethod
    async def restart_replays(conn: asyncpg.Connection, ns: str, process_id: str, task_id: uuid.UUID
                              ) -> list[asyncpg.Record]:
        return await conn.fetch(sql("processes/restart_replays"), ns, process_id, task_id)

    @staticmethod
    async def insert_replays(conn: asyncpg.Connection, ns: str, process_id: str, task_ids: list[uuid.UUID],
                             types: list[str], args: list[str], ranges: list[str | None],
                             restart_of: list[uuid.UUID], queue: str, lock_key: str, priority: int,
                             max_attempts: int, lease_ttl_sec: int) -> int:
        return await conn.fetchval(sql("processes/insert_replays"), ns, process_id, task_ids, types, args, ranges,
                                   restart_of, queue, lock_key, priority, max_attempts, lease_ttl_sec)

    @staticmethod
    async def restart_apply(conn: asyncpg.Connection, ns: str, process_id: str, task_id: uuid.UUID,
                            timer: Timer | None, feed_json: str, snapshot_json: str | None = None) -> tuple[str, int]:
        row = await conn.fetchrow(sql("processes/restart_apply"), ns, process_id, task_id,
                                  timer.task_id if timer else None, timer.type if timer else None,
                                  timer.at if timer else None, feed_json, snapshot_json)
        return row["status"], row["removed_events"]

    # -- consistency check (processes/consistency.py) ------------------------------------------------

    @staticmethod
    async def check_facts(runner: Any, ns: str, after: str | None, limit: int, only_id: str | None = None
                          ) -> list[asyncpg.Record]:
        return await runner.fetch(sql("processes/check_facts"), ns, after, limit, only_id)

    @staticmethod
    async def check_fix(conn: asyncpg.Connection, ns: str, process_id: str, version: int, status: str | None,
                        detail: str | None, corrupted_by: uuid.UUID | None, set_timer: bool,
                        timer: tuple[uuid.UUID | None, str | None, datetime | None], last_event_id: int | None,
                        payload_json: str) -> bool:
        timer_id, timer_type, timer_at = timer
        row = await conn.fetchrow(sql("processes/check_fix"), ns, process_id, version, status, detail, corrupted_by,
                                  set_timer, timer_id, timer_type, timer_at, last_event_id, payload_json)
        return bool(row["fixed"])

    async def read_feed(self, ns: str, after_xid: int, after_seq: int, limit: int) -> list[asyncpg.Record]:
        return await self.pool.fetch(sql("processes/read_feed"), ns, str(after_xid), after_seq, limit)

    async def feed_held_back(self, ns: str, after_xid: int, after_seq: int) -> bool:
        return bool(await self.pool.fetchval(sql("processes/feed_held_back"), ns, str(after_xid), after_seq))

    @staticmethod
    async def import_process(conn: asyncpg.Connection, ns: str, process_id: str, *, status: str,
                             detail: str | None, aux_json: str | None, aux_bytes: bytes | None,
                             metadata_json: str | None, event_ids: list[int], timestamps: list[datetime | None],
                             payloads: list[str], metas: list[str | None], timer: Timer | None) -> bool:
        row = await conn.fetchrow(
            sql("processes/import_process"), ns, process_id, status, detail, seal_text(aux_json), aux_bytes,
            metadata_json, event_ids, timestamps, _sealed(payloads), metas, timer.task_id if timer else None,
            timer.type if timer else None, timer.at if timer else None)
        return bool(row["imported"])
