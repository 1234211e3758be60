"""Processes: init, call, repair, simple repair, get, list, remove — the business rules behind
`App.processes`, the HTTP API (`/api/v1/processes/{ns}/...`) and the CLI alike. No SQL text here.

`init`, `call` and `repair` insert their task (a `dl_jobs` row of queue `process:<ns>` with the
process's lock_key) and wait for its end (`TaskWaiter`: LISTEN, plus a bounded fallback poll),
then return the processor's response or raise its error. Past the caller's `timeout` they raise
`ProcessTimeout` while the task goes on. An idempotency key (unique per namespace) makes a repeat
return the stored response, or wait for the task still in flight.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import json
import re
import time
import uuid
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol

from dataloader import metrics, tracing
from dataloader.exceptions import (
    IdempotencyConflict,
    InvalidCursor,
    InvalidProcess,
    InvalidProcessRequest,
    ProcessExists,
    ProcessNotFound,
    ProcessTaskFailed,
    ProcessTimeout,
    ProcessWrongStatus,
    QueuePaused,
    UnknownNamespace,
)
from dataloader.model.operation import DryRun, Operation
from dataloader.model.process import (
    CALLER_PRIORITY,
    MAX_EVENT_ID,
    NS_PATTERN,
    Event,
    HistoryRange,
    Process,
    ProcessStatus,
    SetTimer,
    TaskType,
    Timer,
    TraceEntry,
    UnsetTimer,
)
from dataloader.model.process_selection import ProcessFilter
from dataloader.model.storable import args_problem
from dataloader.processes.consistency import MAX_CHECK_LIMIT, CheckPage, check_page
from dataloader.processes.feed import FeedItem, FeedPage, follow, parse_cursor, read_page
from dataloader.processes.registry import ProcessorRegistry
from dataloader.processes.restart import RestartPoint, RestartResult, processor_of, restart_in
from dataloader.processes.step import timer_job
from dataloader.processes.waiter import Expectation, TaskWaiter
from dataloader.storage.audit_repository import audited
from dataloader.storage.executor import InTransaction
from dataloader.storage.process_repository import NewTask, ProcessRepository, TaskRecord, dumps

MAX_LIST_LIMIT = 500
DEFAULT_TIMEOUT_SEC = 30.0
MAX_TIMEOUT_SEC = 3600.0
# A shorter wait is no wait (5e-324 was an instant 504 while the task went on): 100 ms at least.
MIN_TIMEOUT_SEC = 0.1
_ID = re.compile(r"^[^\x00]{1,200}$")
# Attempts of a caller task's job: lease-expiry re-runs only (its errors are not retried).
CALLER_MAX_ATTEMPTS = 10


@dataclass(frozen=True)
class ProcessPage:
    processes: list[Process]
    next_cursor: str | None


class BulkOperations(Protocol):
    """What `restart_many` needs of the operations capability (operations/ builds on processes/, so
    the manager is handed in rather than imported)."""

    async def start(self, kind: str, filter: Any, *, params: Mapping[str, Any] | None = None,
                    started_by: str = "unknown", dry_run: bool = False,
                    batch_size: int | None = None) -> Operation | DryRun: ...


class ProcessManager:
    def __init__(self, repo: ProcessRepository, processors: ProcessorRegistry, waiter: TaskWaiter, *,
                 max_args_bytes: int, default_lease_ttl_sec: int,
                 operations: Callable[[], BulkOperations] | None = None, idle_sec: float = 86400) -> None:
        self.repo = repo
        self.idle_sec = idle_sec
        self._operations = operations
        self.processors = processors
        self.waiter = waiter
        self.max_args_bytes = max_args_bytes
        self.default_lease_ttl_sec = default_lease_ttl_sec

    def operations(self) -> BulkOperations:
        if self._operations is None:
            raise RuntimeError("this ProcessManager was built without the operations service")
        return self._operations()

    # -- checks ------------------------------------------------------------------------------------

    def _processor(self, ns: str) -> Any:
        processor = self.processors.get(ns) if isinstance(ns, str) else None
        if processor is None:
            raise UnknownNamespace(f"no processor is registered for namespace {ns!r} "
                                   f"(registered: {', '.join(self.processors.names()) or 'none'})")
        return processor

    @staticmethod
    def _check_ns(ns: Any) -> str:
        if not isinstance(ns, str) or not re.fullmatch(NS_PATTERN, ns):
            raise InvalidProcess(f"ns: must match {NS_PATTERN}")
        return ns

    @staticmethod
    def _check_id(process_id: Any) -> str:
        if not isinstance(process_id, str) or not _ID.fullmatch(process_id) or not process_id.strip():
            raise InvalidProcess("id: must be 1-200 characters, not blank, without NUL")
        return process_id

    def _args_json(self, args: Any) -> str:
        try:
            text = json.dumps(args, allow_nan=False, ensure_ascii=False)
        except (TypeError, ValueError, RecursionError) as exc:
            raise InvalidProcessRequest(f"args must be JSON: {exc}") from None
        problem = args_problem(args, text, self.max_args_bytes)
        if problem:
            raise InvalidProcessRequest(problem)
        return text

    @staticmethod
    def _check_key(key: Any) -> str | None:
        if key is None:
            return None
        if not isinstance(key, str) or not 1 <= len(key) <= 512 or "\x00" in key:
            raise InvalidProcess("idempotency_key: must be 1-512 characters without NUL")
        return key

    @staticmethod
    def _check_timeout(timeout: float | None) -> float:
        if timeout is None:
            return DEFAULT_TIMEOUT_SEC
        if (not isinstance(timeout, int | float) or isinstance(timeout, bool)
                or not MIN_TIMEOUT_SEC <= timeout <= MAX_TIMEOUT_SEC):
            raise InvalidProcess(f"timeout: must be between {MIN_TIMEOUT_SEC:g} and {MAX_TIMEOUT_SEC:g} seconds")
        return float(timeout)

    def _caller_task(self, ns: str, process_id: str, kind: TaskType, args_json: str, key: str | None,
                     history_range: HistoryRange | None = None, request_id: str | None = None) -> NewTask:
        processor = self._processor(ns)
        return NewTask(task_id=uuid.uuid4(), ns=ns, process_id=process_id, type=kind.value, args_json=args_json,
                       queue=processor.queue, priority=CALLER_PRIORITY, max_attempts=CALLER_MAX_ATTEMPTS,
                       lease_ttl_sec=processor.lease_ttl_sec or self.default_lease_ttl_sec,
                       history_range_json=dumps(history_range.to_dict()) if history_range else None,
                       idempotency_key=key, producer="process", request_id=request_id,
                       traceparent=tracing.current_traceparent())

    # -- starting and calling ----------------------------------------------------------------------

    async def init(self, ns: str, process_id: str, args: Any = None, *, idempotency_key: str | None = None,
                   timeout: float | None = None, request_id: str | None = None) -> Any:
        """Create the process and run `init`; returns the processor's response."""
        started = time.perf_counter()
        self._processor(ns)
        process_id, key = self._check_id(process_id), self._check_key(idempotency_key)
        wait = self._check_timeout(timeout)
        task = self._caller_task(ns, process_id, TaskType.init, self._args_json(args), key, request_id=request_id)
        return await self._run_caller(task, None, started, wait)

    async def call(self, ns: str, process_id: str, args: Any = None, *, idempotency_key: str | None = None,
                   range: HistoryRange | Mapping[str, Any] | None = None, timeout: float | None = None,
                   request_id: str | None = None) -> Any:
        """Run `call` on a running process (409 otherwise, naming its status); returns the
        processor's response. `range` limits the history the processor receives."""
        return await self._caller(ns, process_id, TaskType.call, ProcessStatus.running, args,
                                  idempotency_key=idempotency_key, history_range=range, timeout=timeout,
                                  request_id=request_id)

    async def repair(self, ns: str, process_id: str, args: Any = None, *, idempotency_key: str | None = None,
                     timeout: float | None = None, request_id: str | None = None) -> Any:
        """Run `repair` on a process in `error`; on success it is `running` again (and a timer the
        failure suspended is re-armed)."""
        return await self._caller(ns, process_id, TaskType.repair, ProcessStatus.error, args,
                                  idempotency_key=idempotency_key, history_range=None, timeout=timeout,
                                  request_id=request_id)

    async def _caller(self, ns: str, process_id: str, kind: TaskType, needed: ProcessStatus, args: Any, *,
                      idempotency_key: str | None, history_range: Any, timeout: float | None,
                      request_id: str | None) -> Any:
        started = time.perf_counter()
        self._processor(ns)
        process_id, key = self._check_id(process_id), self._check_key(idempotency_key)
        wait = self._check_timeout(timeout)
        try:
            hrange = HistoryRange.of(history_range) if history_range is not None else None
        except (TypeError, ValueError) as exc:
            raise InvalidProcessRequest(str(exc)) from None
        task = self._caller_task(ns, process_id, kind, self._args_json(args), key, hrange, request_id)
        return await self._run_caller(task, needed.value, started, wait)

    async def _run_caller(self, task: NewTask, needed: str | None, started: float, wait: float) -> Any:
        """Queue the caller's task and wait for its outcome. The waiter is told the new task's id
        before the insert, so the wait needs no first read of a task that cannot have ended yet."""
        expectation = await self.waiter.expect(task.task_id)
        try:
            task_id = await self._enqueue(task, needed)
            metrics.PROCESS_PREPARE_SECONDS.labels(task.ns, task.type).observe(time.perf_counter() - started)
            return await self._outcome(task_id, task.ns, wait, expectation)
        finally:
            self.waiter.forget(expectation)

    async def _enqueue(self, task: NewTask, needed: str | None) -> uuid.UUID:
        """Queue a caller's task (one statement), or find the task its idempotency key already names.
        `needed`: the status the process must have (None: init, which creates it). A repair is an
        operator's change: its task is queued with its audit row (an init or a call is a trigger,
        as an enqueue is: none)."""
        if task.type != TaskType.repair:
            return await self._enqueue_on(self.repo, task, needed)
        async with audited(self.repo, "process.repair", "process", f"{task.ns}/{task.process_id}",
                           {"task_id": str(task.task_id)}) as change:
            return await self._enqueue_on(change.repo, task, needed)

    async def _enqueue_on(self, repo: ProcessRepository, task: NewTask, needed: str | None) -> uuid.UUID:
        if task.idempotency_key is None:
            row = await repo.enqueue_caller(repo.pool, task, needed)
            self._check_enqueued(task, row, needed)
            return task.task_id
        async with repo.pool.acquire() as conn, conn.transaction():
            replay = await self._replay(conn, task)
            if replay is not None:
                return replay
            row = await repo.enqueue_caller(conn, task, needed)
            if not row["queued"]:
                # A concurrent request with the same key may have committed meanwhile (it held the
                # key or the new id until then): then this is its replay, not a clash.
                replay = await self._replay(conn, task)
                if replay is not None:
                    return replay
            self._check_enqueued(task, row, needed)
            return task.task_id

    @staticmethod
    def _check_enqueued(task: NewTask, row: Any, needed: str | None) -> None:
        if row["queued"]:
            return
        paused = QueuePaused(f"queue {task.queue!r} of namespace {task.ns!r} is paused: no {task.type} task can start "
                             "until it is resumed; nothing was queued", task.queue)
        if needed is None:
            if row["status"] is None and row["paused"]:
                raise paused
            raise ProcessExists(f"process {task.process_id!r} already exists in namespace {task.ns!r}")
        if row["status"] is None:
            raise ProcessNotFound(f"no process {task.process_id!r} in namespace {task.ns!r}")
        if row["status"] == needed and row["paused"]:
            raise paused
        raise ProcessWrongStatus(f"process {task.process_id!r} is {row['status']}; a {task.type} needs it {needed}",
                                 row["status"])

    async def _replay(self, conn: Any, task: NewTask) -> uuid.UUID | None:
        """The task an idempotency key already names (None: new key). The same key for another
        process or task type is a conflict."""
        if task.idempotency_key is None:
            return None
        existing = await self.repo.get_task_by_key(task.ns, task.idempotency_key, InTransaction(conn))
        if existing is None:
            return None
        if existing.process_id != task.process_id or existing.type != task.type:
            raise IdempotencyConflict(
                f"idempotency_key {task.idempotency_key!r} already names a {existing.type} task of process "
                f"{existing.process_id!r}")
        return existing.task_id

    async def _outcome(self, task_id: uuid.UUID, ns: str, timeout: float, expected: Expectation) -> Any:
        ended, record = await self.waiter.wait(
            task_id, lambda: self.repo.get_task(task_id), lambda r: r is None or r.status != "waiting", timeout,
            expected)
        if record is None:
            raise ProcessNotFound(f"the process of task {task_id} was removed before the task ended")
        if not ended:
            raise ProcessTimeout(
                f"task {task_id} did not end within {timeout:g} s; it goes on and its result will be stored "
                "(repeat with the same idempotency_key, or read the process's trace)", str(task_id))
        if record.finished_at is not None:
            lag = (datetime.now(UTC) - record.finished_at).total_seconds()
            metrics.PROCESS_NOTIFICATION_SECONDS.labels(ns).observe(max(lag, 0.0))
        return self._result(record)

    @staticmethod
    def _result(record: TaskRecord) -> Any:
        if record.status == "finished":
            return record.response
        wrong = record.response.get("wrong_status") if isinstance(record.response, dict) else None
        if record.status == "error" and wrong is not None:
            raise ProcessWrongStatus(record.error or f"process is {wrong}", str(wrong))
        if record.status == "cancelled":
            raise ProcessTaskFailed(f"{record.type} task {record.task_id} was cancelled: {record.error or ''}".strip(),
                                    str(record.task_id))
        raise ProcessTaskFailed(record.error or f"{record.type} task {record.task_id} failed", str(record.task_id))

    # -- operators ---------------------------------------------------------------------------------

    async def simple_repair(self, ns: str, process_id: str) -> Process:
        """Clear the error without calling the processor: `running` again, and the timer the failure
        suspended (the failed timer task itself, or the timer armed when a call failed) re-armed. The
        processor need not be registered here (it is never called; the timer's job takes the
        namespace's registration defaults, as a restart's do)."""
        self._check_ns(ns)
        processor, lease_ttl_sec = processor_of(ns, self.default_lease_ttl_sec)
        process_id = self._check_id(process_id)
        async with audited(self.repo, "process.simple_repair", "process", f"{ns}/{process_id}") as change, \
                change.repo.pool.acquire() as conn, conn.transaction():
            repo = change.repo
            stored = await repo.lock_process(conn, ns, process_id)
            if stored is None:
                raise ProcessNotFound(f"no process {process_id!r} in namespace {ns!r}")
            process = stored.process
            if process.status != ProcessStatus.error:
                raise ProcessWrongStatus(
                    f"process {process_id!r} is {process.status.value}; simple repair needs it error",
                    process.status.value)
            timer = None
            suspended = process.suspended_timer
            if suspended is not None:
                due = max(suspended.at, datetime.now(UTC))
                task = timer_job(ns, process_id, suspended.type, due, processor, lease_ttl_sec)
                await repo.insert_task(conn, task)
                timer = Timer(suspended.type, due, task.task_id)
            await repo.simple_repair(conn, ns, process_id, stored.version, timer)
        return await self.get(ns, process_id, HistoryRange(limit=1, direction="backward"))

    async def restart(self, ns: str, process_id: str, from_: str | None = None, *, task_id: Any = None,
                      event_id: Any = None) -> RestartResult:
        """Put the process back to the state a task found and run that task again, then the calls that
        finished after it (processes/restart.py): `from_="start"` (its first init), `"error"` (the
        task that broke it), or `task_id=` / `event_id=` (the task that wrote that event). Does not
        wait for the tasks; `trace` shows them. ProcessBusy while a task of it runs or waits."""
        self._check_ns(ns)  # the processor need not be registered here: an operator's node may restart
        process_id = self._check_id(process_id)
        point = RestartPoint.of(from_, task_id=task_id, event_id=event_id)
        started = time.perf_counter()
        async with audited(self.repo, "process.restart", "process", f"{ns}/{process_id}",
                           {"from": point.kind, "task_id": _str(task_id), "event_id": event_id}) as change, \
                change.repo.pool.acquire() as conn, conn.transaction():
            result = await restart_in(conn, change.repo, ns, process_id, point,
                                      default_lease_ttl_sec=self.default_lease_ttl_sec)
        metrics.PROCESS_RESTARTS.labels(ns, point.kind).inc()
        metrics.PROCESS_RESTART_SECONDS.labels(ns).observe(time.perf_counter() - started)
        return result

    async def restart_many(self, filter: ProcessFilter | Mapping[str, Any], from_: str | None = None, *,
                           event_id: int | None = None, started_by: str = "unknown", dry_run: bool = False,
                           batch_size: int | None = None) -> Operation | DryRun:
        """Restart every process the filter matches (its `ns` is required) as a tracked bulk operation
        (`app.operations` shows, pauses, resumes, cancels it); each process as `restart` does, from
        `"start"`, `"error"` or `event_id`. A process that cannot be restarted when its batch comes
        (busy, nothing to go back to) is skipped, and the operation's audit trail says why."""
        params: dict[str, Any] = {"from": from_} if from_ is not None else {"from_event": event_id}
        return await self.operations().start("process_restart", filter, params=params, started_by=started_by,
                                             dry_run=dry_run, batch_size=batch_size)

    async def check(self, ns: str, *, repair: bool = False, cursor: str | None = None,
                    limit: int = 500) -> CheckPage:
        """The consistency check of a namespace, a page of processes at a time (processes/
        consistency.py): processes whose state and tasks disagree, and idle ones; with `repair`,
        what can be repaired is, each process under its lock_key. Pass `next_cursor` for the next
        page. The processor need not be registered here."""
        self._check_ns(ns)
        if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_CHECK_LIMIT:
            raise InvalidProcess(f"limit: must be between 1 and {MAX_CHECK_LIMIT}")
        after = _decode_cursor(cursor) if cursor else None
        page = await check_page(self.repo.pool, ns, after=after, limit=limit, repair=bool(repair),
                                idle_sec=self.idle_sec, default_lease_ttl_sec=self.default_lease_ttl_sec)
        return CheckPage(page.findings, page.examined,
                         _encode_cursor(page.next_cursor) if page.next_cursor is not None else None)

    async def get(self, ns: str, process_id: str, range: HistoryRange | Mapping[str, Any] | None = None
                  ) -> Process:
        """The process with a page of its history (default: all of it, oldest first)."""
        self._check_ns(ns)
        process_id = self._check_id(process_id)
        try:
            hrange = HistoryRange.of(range)
        except (TypeError, ValueError) as exc:
            raise InvalidProcess(f"range: {exc}") from None
        stored = await self.repo.get_process(ns, process_id)
        if stored is None:
            raise ProcessNotFound(f"no process {process_id!r} in namespace {ns!r}")
        history = await self.repo.events(ns, process_id, hrange)
        from dataclasses import replace

        return replace(stored.process, history=history).shown()  # masked without READ_PAYLOAD

    async def remove(self, ns: str, process_id: str) -> None:
        """Delete the process and all its rows; its queued tasks are canceled (their callers get
        ProcessNotFound). A step running right now writes nothing (it finds the process gone)."""
        self._check_ns(ns)
        process_id = self._check_id(process_id)
        started = time.perf_counter()
        async with audited(self.repo, "process.remove", "process", f"{ns}/{process_id}") as change:
            if not await change.repo.delete_process(ns, process_id, change.tx):
                raise ProcessNotFound(f"no process {process_id!r} in namespace {ns!r}")
        metrics.PROCESS_REMOVE_SECONDS.labels(ns).observe(time.perf_counter() - started)

    async def list(self, ns: str, *, status: ProcessStatus | str | None = None, cursor: str | None = None,
                   limit: int = 100) -> ProcessPage:
        """Processes of a namespace by id (without history), `limit` at a time; pass the page's
        `next_cursor` for the next one."""
        self._check_ns(ns)
        if not isinstance(limit, int) or not 1 <= limit <= MAX_LIST_LIMIT:
            raise InvalidProcess(f"limit: must be between 1 and {MAX_LIST_LIMIT}")
        if status is not None:
            try:
                status = ProcessStatus(status).value
            except ValueError:
                raise InvalidProcess(
                    f"status: unknown {status!r}; known: {', '.join(s.value for s in ProcessStatus)}") from None
        after = _decode_cursor(cursor) if cursor else None
        rows = [p.shown() for p in await self.repo.list_processes(ns, status, after, limit + 1)]
        if len(rows) <= limit:
            return ProcessPage(rows, None)
        return ProcessPage(rows[:limit], _encode_cursor(rows[limit - 1].id))

    async def counts(self) -> dict[str, dict[str, int]]:
        """Processes per namespace and status, every namespace that has any (the console's
        Processes page): `{"orders": {"init": 0, "running": 12, "error": 1}}`. The dl_processes
        gauge's statement, without its idle count; one pass over the table."""
        counts: dict[str, dict[str, int]] = {}
        for row in await self.repo.count_by_status(0):
            counts.setdefault(row["ns"], dict.fromkeys((s.value for s in ProcessStatus), 0))[row["status"]] = \
                row["processes"]
        return dict(sorted(counts.items()))

    async def trace(self, ns: str, process_id: str) -> list[TraceEntry]:
        """Every task of the process, oldest first (args, status, times, attempts, response,
        error), each with the events it produced; `to_dict()` is the JSON of HTTP and the CLI."""
        self._check_ns(ns)
        process_id = self._check_id(process_id)
        if await self.repo.get_process(ns, process_id) is None:
            raise ProcessNotFound(f"no process {process_id!r} in namespace {ns!r}")
        tasks = await self.repo.list_tasks(ns, process_id)
        events = await self.repo.events(ns, process_id, HistoryRange())
        by_task: dict[uuid.UUID | None, list[Event]] = {}
        for event in events:
            by_task.setdefault(event.task_id, []).append(event)
        trace = [TraceEntry(t, by_task.pop(t.task_id, [])) for t in tasks]
        if by_task:  # events written without a task of this process (an import by put)
            trace.insert(0, TraceEntry(None, [e for es in by_task.values() for e in es]))
        return trace

    # -- import, feed, metrics -----------------------------------------------------------------------

    async def put(self, ns: str, process: Mapping[str, Any], action: SetTimer | UnsetTimer | None = None) -> Process:
        """Import a whole process (migration from another system): `{"id", "status" (default
        running), "detail", "aux_state", "metadata", "history": [{"event_id", "timestamp",
        "payload", "metadata"}]}`; event ids default to 1, 2, 3…. `action` may arm its timer
        (`SetTimer`, also with `remove=True`). `ProcessExists` if the id is taken."""
        processor = self._processor(ns)
        if not isinstance(process, Mapping):
            raise InvalidProcessRequest("process must be a mapping")
        unknown = set(process) - {"id", "status", "detail", "aux_state", "metadata", "history"}
        if unknown:
            raise InvalidProcessRequest(f"unknown process field(s): {', '.join(sorted(map(str, unknown)))}")
        process_id = self._check_id(process.get("id"))
        try:
            status = ProcessStatus(process.get("status", "running")).value
        except ValueError:
            raise InvalidProcessRequest("status must be init, running or error") from None
        detail = process.get("detail")
        if detail is not None and (not isinstance(detail, str) or "\x00" in detail):
            raise InvalidProcessRequest("detail must be text without NUL")
        aux = process.get("aux_state")
        aux_json, aux_bytes = (None, bytes(aux)) if isinstance(aux, bytes | bytearray) else (
            None if aux is None else self._json("aux_state", aux), None)
        metadata = process.get("metadata")
        metadata_json = None if metadata is None else self._json("metadata", metadata)
        history = process.get("history") or []
        if not isinstance(history, list | tuple):
            raise InvalidProcessRequest("history must be a list of events")
        ids, stamps, payloads, metas = [], [], [], []
        for n, event in enumerate(history, start=1):
            if not isinstance(event, Mapping) or "payload" not in event:
                raise InvalidProcessRequest(f"history[{n - 1}] must be a mapping with a payload")
            event_id = event.get("event_id", n)
            if not isinstance(event_id, int) or isinstance(event_id, bool) or not 1 <= event_id <= MAX_EVENT_ID or (
                    ids and event_id <= ids[-1]):
                raise InvalidProcessRequest("event ids must be integers >= 1, strictly increasing")
            ids.append(event_id)
            stamps.append(_timestamp(event.get("timestamp"), n - 1))
            payloads.append(self._json(f"history[{n - 1}].payload", event["payload"]))
            metas.append(None if event.get("metadata") is None else self._json("event metadata", event["metadata"]))
        if action is not None and not isinstance(action, SetTimer | UnsetTimer):
            raise InvalidProcessRequest("action must be SetTimer, UnsetTimer or None")
        if isinstance(action, SetTimer) and status != ProcessStatus.running.value:
            raise InvalidProcessRequest("only a running process can be imported with a timer")
        async with audited(self.repo, "process.put", "process", f"{ns}/{process_id}",
                           {"status": status, "events": len(ids), "timer": type(action).__name__ if action else None}
                           ) as change, change.repo.pool.acquire() as conn, conn.transaction():
            timer = None
            task = None
            if isinstance(action, SetTimer):
                kind = "remove" if action.remove else "timeout"
                task = timer_job(ns, process_id, kind, action.due(), processor, self.default_lease_ttl_sec)
                timer = Timer(kind, task.due_at, task.task_id)  # type: ignore[arg-type]
            if not await change.repo.import_process(
                    conn, ns, process_id, status=status, detail=detail, aux_json=aux_json, aux_bytes=aux_bytes,
                    metadata_json=metadata_json, event_ids=ids, timestamps=stamps, payloads=payloads, metas=metas,
                    timer=timer):
                raise ProcessExists(f"process {process_id!r} already exists in namespace {ns!r}")
            if task is not None:
                await change.repo.insert_task(conn, task)
        return await self.get(ns, process_id, HistoryRange(limit=1, direction="backward"))

    def _json(self, what: str, value: Any) -> str:
        try:
            return self._args_json(value)
        except InvalidProcessRequest as exc:
            raise InvalidProcessRequest(f"{what}: {exc}") from None

    async def feed(self, ns: str, *, after: str | None = None, limit: int = 100) -> FeedPage:
        """A page of the namespace's event feed after the cursor `after` (None: from the start);
        `page.cursor` is where the next read starts. Rows come in a stable order, each exactly once."""
        if not isinstance(limit, int) or not 1 <= limit <= 1000:
            raise InvalidProcessRequest("limit must be between 1 and 1000")
        return await read_page(self.repo, ns, after, limit)

    def follow(self, ns: str, *, after: str | None = None, stop: asyncio.Event | None = None,
               poll_sec: float = 10.0) -> AsyncIterator[FeedItem]:
        """The namespace's feed from `after` on, as it grows (LISTEN; until `stop` is set)."""
        parse_cursor(after)
        return follow(self.repo, self.waiter, ns, after, stop=stop, poll_sec=poll_sec)

    def require_namespace(self, ns: str) -> None:
        """UnknownNamespace unless a processor of `ns` is registered in this process."""
        self._processor(ns)

    @staticmethod
    def check_cursor(cursor: str | None) -> None:
        parse_cursor(cursor)

    async def refresh_metrics(self) -> None:
        """Set dl_processes (processes by namespace and status) and dl_processes_idle from the
        database."""
        rows = await self.repo.count_by_status(self.idle_sec)
        metrics.PROCESSES.clear()
        metrics.PROCESSES_IDLE.clear()
        idle: dict[str, int] = {}
        for row in rows:
            metrics.PROCESSES.labels(row["ns"], row["status"]).set(row["processes"])
            idle[row["ns"]] = idle.get(row["ns"], 0) + row["idle"]
        for ns, count in idle.items():
            metrics.PROCESSES_IDLE.labels(ns).set(count)

    async def task(self, task_id: uuid.UUID) -> TaskRecord | None:
        return await self.repo.get_task(task_id)


def _str(value: Any) -> str | None:
    return None if value is None else str(value)


def _timestamp(value: Any, index: int) -> datetime | None:
    if value is None:
        return None
    if isinstance(value, str):
        try:
            value = datetime.fromisoformat(value)
        except ValueError:
            raise InvalidProcessRequest(f"history[{index}].timestamp is not an ISO time") from None
    if not isinstance(value, datetime) or value.tzinfo is None:
        raise InvalidProcessRequest(f"history[{index}].timestamp must be an aware time")
    return value


def _encode_cursor(last_id: str) -> str:
    return base64.urlsafe_b64encode(json.dumps([last_id]).encode()).decode().rstrip("=")


def _decode_cursor(cursor: str) -> str:
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        (last_id,) = json.loads(raw)
        if not isinstance(last_id, str):
            raise ValueError("not an id")
        return last_id
    except (binascii.Error, ValueError, TypeError, UnicodeDecodeError, RecursionError):
        raise InvalidCursor("cursor is not one this API returned; start again without it") from None
