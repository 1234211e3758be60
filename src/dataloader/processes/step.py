"""The built-in pipeline `dl.process`: one task of one process, run as an ordinary job.

Every process task (init, call, repair, timeout, remove) is a `dl_jobs` row of queue
`process:<ns>` with lock_key `process:<ns>:<id>`, so the engine's one holder per lock_key makes it
the only task of its process running anywhere, and a finish wakes the next one at once. A step:

1. reads its task and process (no transaction: nothing else of the process can run now);
2. decides whether the task applies (status, superseded timer, a pending call ahead of a timer,
   a task of a dead node under `on_lost="error"`);
3. runs the processor outside any transaction (a slow processor holds no row lock and does not
   hold back the event feed);
4. writes everything in ONE transaction, `ctx.transaction()`, which also finishes the job,
   fenced: the new events and their feed rows, the process state, the timer change (old timer
   job canceled, new one inserted as a delayed job), the task's end and the NOTIFY its caller
   waits for. A fenced-off attempt (lease expired, the task runs elsewhere) rolls all of it back.

Failures follow progressor: init/call errors are not retried (the process goes to `error`), a
repair error leaves it in `error`, timeout/remove errors are retried per the namespace's
RetryPolicy and then put it in `error`.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from dataloader import metrics, tracing
from dataloader.exceptions import FatalError, InvalidIntent, Retry, Snooze
from dataloader.model.process import (
    CALLER_PRIORITY,
    TIMER_PRIORITY,
    UNSET,
    HistoryRange,
    Intent,
    NewEvent,
    Process,
    ProcessStatus,
    ProcessTask,
    SetTimer,
    TaskType,
    Timer,
    UnsetTimer,
)
from dataloader.model.storable import encode_json
from dataloader.processes.registry import Processor, processors
from dataloader.storage.db import is_connection_error
from dataloader.storage.executor import InTransaction
from dataloader.storage.process_repository import (
    NewTask,
    ProcessRepository,
    StepWrite,
    dumps,
    events_from_json,
    process_from_row,
)
from dataloader.workers.outcome import describe
from dataloader.workers.pipelines.context import JobContext

log = logging.getLogger("dataloader.processes")
# A step cut off by a database restart runs again this long after it is handed back.
DATABASE_LOST_SNOOZE_SEC = 1.0

# Largest JSON value (response, aux_state, metadata, one event) a step stores.
MAX_VALUE_BYTES = 1024 * 1024


class _ProcessLog(logging.LoggerAdapter):  # type: ignore[type-arg]
    """Every line carries ns, process_id, task_id and task_type, plus the call's own extra fields
    (the stock LoggerAdapter replaces them)."""

    def process(self, msg: Any, kwargs: Any) -> tuple[Any, Any]:
        kwargs["extra"] = {**(self.extra or {}), **(kwargs.get("extra") or {})}
        return msg, kwargs


@dataclass(frozen=True)
class ProcessContext:
    """The third argument of a processor: where it runs and a logger bound to the process."""

    ns: str
    process_id: str
    task_id: uuid.UUID
    attempt: int
    log: logging.LoggerAdapter  # type: ignore[type-arg]


def timer_job(ns: str, process_id: str, kind: str, due: datetime, processor: Processor, lease_ttl_sec: int
              ) -> NewTask:
    """The task + delayed job of a timer (`timeout` or `remove`) due at `due`. Traced, the timer's
    run starts a trace of its own with a link to the span that armed it (a step, a request): a
    process that re-arms its timer forever must not make one endless trace."""
    return NewTask(task_id=uuid.uuid4(), ns=ns, process_id=process_id, type=kind, args_json="null",
                   queue=processor.queue, priority=TIMER_PRIORITY,
                   max_attempts=min(processor.retry.max_attempts + 10, 1000),
                   lease_ttl_sec=processor.lease_ttl_sec or lease_ttl_sec, due_at=due, producer="process",
                   cause_span=tracing.current_traceparent())


async def run_step(ctx: JobContext) -> None:
    ns = ctx.args["ns"]
    if ctx.db is None:
        raise FatalError("dl.process runs only in the engine (it needs the database)")
    processor = processors.get(ns)
    if processor is None:
        raise FatalError(f"no processor registered for namespace {ns!r} on this worker "
                         f"(registered: {', '.join(processors.names()) or 'none'})")
    try:
        await _run_step(ctx, processor)
    except Exception as exc:
        if not is_connection_error(exc):
            raise
        # The database went away under the step's own reads or writes (a restart): its
        # transaction did not commit (had it committed, the job is finished and this hand-back is
        # refused). A restart is weather, not an error (promise 10): run it again once the database
        # is back, without using an attempt and without the retry backoff. The processor's own
        # errors never get here: _Step.run hands them to the retry policy.
        log.warning("process step: database unavailable; the task runs again", extra={
            "ns": ns, "task_id": str(ctx.job_id), "error": f"{type(exc).__name__}: {exc}"})
        raise Snooze(DATABASE_LOST_SNOOZE_SEC) from exc


async def _run_step(ctx: JobContext, processor: Processor) -> None:
    assert ctx.db is not None
    repo = ProcessRepository(ctx.db)
    row = await repo.load_step(ctx.job_id, ctx.lock_key, CALLER_PRIORITY)
    if row is None or row["task_status"] != "waiting":
        return  # the process was removed (its tasks with it), or this task already ended
    step = _Step(ctx, repo, processor, row)
    try:
        # a span of the step, in the attempt's trace: `init orders`, `call orders`...
        with tracing.child_span(f"{step.type.value} {step.ns}", {
                "dataloader.process.ns": step.ns, "dataloader.process.id": step.pid,
                "dataloader.process.task_type": step.type.value, "dataloader.process.task_id": str(step.task_id)}):
            await step.run()
    except _Superseded:
        # Its caller must not wait on a task nothing will end: it ends cancelled (a removed
        # process took the task row with it, so this changes nothing then).
        step.log.info("process changed or removed while its task ran; the step wrote nothing")
        await step._end_quietly("cancelled", "the process was changed (restarted, repaired or imported) "
                                             "while this task ran; the task wrote nothing")


class _Step:
    def __init__(self, ctx: JobContext, repo: ProcessRepository, processor: Processor, row: Any) -> None:
        self.ctx = ctx
        self.repo = repo
        self.processor = processor
        stored = process_from_row(row)
        self.process: Process = stored.process
        self.version = stored.version
        self.task_id: uuid.UUID = row["task_id"]
        self.type = TaskType(row["task_type"])
        self.args = row["args"]
        self.history_range = row["history_range"]
        self.caller_pending = bool(row["caller_pending"])
        self.history = None if row["history"] is None else events_from_json(row["history"])
        self.idempotency_key = row["idempotency_key"]
        self.log = _ProcessLog(log, {"ns": self.process.ns, "process_id": self.process.id,
                                               "task_id": str(self.task_id), "task_type": self.type.value})

    @property
    def ns(self) -> str:
        return self.process.ns

    @property
    def pid(self) -> str:
        return self.process.id

    async def run(self) -> None:
        process, kind = self.process, self.type
        if self.processor.on_lost == "error" and self.ctx.attempt > 1:
            started = time.perf_counter()
            if await self.repo.was_reaped(self.task_id):
                await self._zombie()
                metrics.PROCESS_ZOMBIE_SECONDS.labels(self.ns).observe(time.perf_counter() - started)
                return
        if kind in (TaskType.timeout, TaskType.remove):
            armed = process.timer
            if armed is None or armed.task_id != self.task_id or process.status != ProcessStatus.running:
                await self._end_quietly("cancelled", "timer superseded or process not running")
                return
            if self.caller_pending:
                # A call or repair arrived for this process: the timer waits behind it (claims take
                # callers first), and runs after unless that call's result moves or unsets it.
                raise Snooze(0)
            lateness = (datetime.now(UTC) - armed.at).total_seconds()
            metrics.PROCESS_TIMER_LATENESS_SECONDS.labels(self.ns, kind.value).observe(max(lateness, 0.0))
            if kind is TaskType.remove:
                await self._remove()
                return
        needed = {TaskType.init: ProcessStatus.init, TaskType.call: ProcessStatus.running,
                  TaskType.repair: ProcessStatus.error, TaskType.timeout: ProcessStatus.running}[kind]
        if process.status != needed:
            # It changed after the task was queued (a call behind one that failed): the caller
            # gets what the API answers up front, a wrong-status error naming the status.
            await self._end_quietly("error", f"process {self.pid!r} is {process.status.value}; "
                                             f"a {kind.value} needs it {needed.value}",
                                    response_json=dumps({"wrong_status": process.status.value}))
            return
        history = self.history
        if history is None:
            history = await self.repo.events(self.ns, self.pid, HistoryRange.of(self.history_range))
        process = _with_history(process, history)
        task = ProcessTask(task_id=self.task_id, type=kind, args=self.args, attempt=self.ctx.attempt,
                           idempotency_key=self.idempotency_key)
        pctx = ProcessContext(self.ns, self.pid, self.task_id, self.ctx.attempt, self.log)
        started = time.perf_counter()
        try:
            if self.processor.is_async:
                result = await self.processor.func(task, process, pctx)
            else:
                result = await asyncio.to_thread(self.processor.func, task, process, pctx)
            write = self._success(_check_intent(result))
        except (asyncio.CancelledError, Snooze, Retry):
            raise
        except Exception as exc:
            metrics.PROCESS_TASK_SECONDS.labels(self.ns, kind.value, "error").observe(time.perf_counter() - started)
            await self._failed(exc)
            return
        metrics.PROCESS_TASK_SECONDS.labels(self.ns, kind.value, "ok").observe(time.perf_counter() - started)
        await self._commit(write, intent_action=result.action if isinstance(result, Intent) else None)

    # -- outcomes ------------------------------------------------------------------------------------

    def _success(self, intent: Intent) -> _Pending:
        kind = self.type
        aux_set = intent.aux_state is not UNSET
        aux_json, aux_bytes = (None, None)
        if aux_set:
            aux_json, aux_bytes = _encode_aux(intent.aux_state)
        metadata_json = None
        if intent.metadata is not UNSET:
            metadata_json = _encode("metadata", intent.metadata if intent.metadata is not None else {})
        payloads, metas = [], []
        for event in intent.events:
            if isinstance(event, NewEvent):
                payloads.append(_encode("event payload", event.payload))
                metas.append(None if event.metadata is None else _encode("event metadata", event.metadata))
            else:
                payloads.append(_encode("event payload", event))
                metas.append(None)
        response_json = None if intent.response is None else _encode("response", intent.response)
        lifecycle = {TaskType.init: ("init",), TaskType.repair: ("repair",)}.get(kind, ())
        return _Pending(StepWrite(
            status=ProcessStatus.running.value, detail=None if kind is TaskType.repair else self.process.detail,
            corrupted_by=None if kind is TaskType.repair else self.process.corrupted_by, timer=None,
            response_json=response_json, aux_set=aux_set, aux_json=aux_json, aux_bytes=aux_bytes,
            metadata_set=intent.metadata is not UNSET, metadata_json=metadata_json,
            event_payloads=tuple(payloads), event_metadata=tuple(metas), lifecycle=lifecycle,
            lifecycle_json=dumps({"status": "running", "task_type": kind.value})))

    async def _commit(self, pending: _Pending, intent_action: Any) -> None:
        """Write a successful step: the timer change and apply_step, in the job's transaction."""
        started = time.perf_counter()
        async with self.ctx.transaction() as conn:
            timer = await self._next_timer(conn, intent_action)
            write = pending.write
            write = StepWrite(**{**_fields(write), "timer": timer})
            if not await self.repo.apply_step(conn, self.ns, self.pid, self.task_id, self.version, write):
                # Changed meanwhile (removed or replaced through the API): nothing of this step
                # lands, the timer change included (it is in this transaction).
                raise _Superseded
        metrics.PROCESS_COMPLETION_SECONDS.labels(self.ns).observe(time.perf_counter() - started)
        self.log.info("process task done", extra={"ns": self.ns, "process_id": self.pid,
                                                   "events": len(write.event_payloads)})

    async def _next_timer(self, conn: Any, action: Any) -> Timer | None:
        """Apply the intent's action to the process's one timer, in the step's transaction."""
        armed = self.process.timer
        own = armed is not None and armed.task_id == self.task_id  # this step IS the timer firing
        if action is None:
            if self.type is TaskType.repair and self.process.suspended_timer is not None:
                suspended = self.process.suspended_timer
                return await self._arm(conn, suspended.type, max(suspended.at, datetime.now(UTC)))
            return None if own else armed
        if armed is not None and not own:
            await self.repo.cancel_timer(conn, armed.task_id, "timer replaced by the processor")  # type: ignore[arg-type]
        if isinstance(action, UnsetTimer):
            return None
        return await self._arm(conn, "remove" if action.remove else "timeout", action.due())

    async def _arm(self, conn: Any, kind: str, due: datetime) -> Timer:
        task = timer_job(self.ns, self.pid, kind, due, self.processor, self._lease_ttl())
        await self.repo.insert_task(conn, task)
        return Timer(kind, due, task.task_id)

    def _lease_ttl(self) -> int:
        return self.processor.lease_ttl_sec or 60

    async def _failed(self, exc: BaseException) -> None:
        kind, error = self.type, describe(exc)
        if kind in (TaskType.timeout, TaskType.remove):
            policy = self.processor.retry
            if policy.retryable(exc) and self.ctx.attempt < policy.max_attempts:
                delay = policy.delay(self.ctx.attempt)
                self.log.warning("process timer task failed; will retry",
                                 extra={"error": error, "attempt": self.ctx.attempt, "retry_in_sec": delay})
                raise Retry(after=delay, reason=error) from exc
        self.log.warning("process task failed", extra={"error": error, "attempt": self.ctx.attempt},
                         exc_info=exc if not isinstance(exc, InvalidIntent | FatalError) else None)
        await self._to_error(error, task_error=error)

    async def _to_error(self, detail: str, *, task_error: str) -> None:
        """The process goes to `error` (corrupted_by this task); a repair that failed leaves it there
        with its first cause. Its armed timer is disarmed and kept as suspended, so a repair re-arms
        it; a timer that failed itself is kept as suspended to be re-run (simple_repair)."""
        started = time.perf_counter()
        process, kind = self.process, self.type
        repairing = kind is TaskType.repair
        async with self.ctx.transaction() as conn:
            timer = process.suspended_timer if repairing else None
            armed = process.timer
            if not repairing and armed is not None:
                if armed.task_id != self.task_id:
                    await self.repo.cancel_timer(conn, armed.task_id, "process went to error")  # type: ignore[arg-type]
                    timer = Timer(armed.type, armed.at, None)
                else:
                    timer = Timer(armed.type, datetime.now(UTC), None)
            # A failed repair keeps the first cause, as corrupted_by does; its own error is on its task.
            first_cause = process.detail if repairing and process.detail else detail
            write = StepWrite(
                status=ProcessStatus.error.value, detail=first_cause[:4000],
                corrupted_by=process.corrupted_by if repairing else self.task_id, timer=timer,
                task_status="error", task_error=task_error[:4000],
                lifecycle=() if repairing else ("error",),
                lifecycle_json=dumps({"status": "error", "detail": detail[:4000], "task_type": kind.value}))
            if not await self.repo.apply_step(conn, self.ns, self.pid, self.task_id, self.version, write):
                raise _Superseded
        metrics.PROCESS_COMPLETION_SECONDS.labels(self.ns).observe(time.perf_counter() - started)

    async def _zombie(self) -> None:
        """on_lost="error": the node running this task died (its lease expired, or a node on its
        machine saw its pid gone, and the reaper gave the task back). Like progressor, park the
        process in `error` instead of running it again."""
        self.log.error("process task of a dead node: process parked in error (on_lost='error')")
        detail = (f"zombie detected: the node running {self.type.value} task {self.task_id} stopped "
                  "(its lease expired or its process died)")
        if self.type is TaskType.repair:
            await self._end_quietly("error", detail)
            return
        await self._to_error(detail, task_error=detail)

    async def _remove(self) -> None:
        started = time.perf_counter()
        async with self.ctx.transaction() as conn:
            await self.repo.delete_process(self.ns, self.pid, InTransaction(conn), self.task_id)
        metrics.PROCESS_REMOVE_SECONDS.labels(self.ns).observe(time.perf_counter() - started)
        self.log.info("process removed by its timer")

    async def _end_quietly(self, status: str, error: str, response_json: str | None = None) -> None:
        async with self.ctx.transaction() as conn:
            await self.repo.end_task(conn, self.task_id, status, error, response_json)
        self.log.info("process task not applicable", extra={"status": status, "reason": error})


class _Superseded(Exception):
    """The process changed under the step (removed, or changed through the API)."""


@dataclass(frozen=True)
class _Pending:
    write: StepWrite


def _fields(write: StepWrite) -> dict[str, Any]:
    return {name: getattr(write, name) for name in StepWrite.__dataclass_fields__}


def _with_history(process: Process, history: list[Any]) -> Process:
    from dataclasses import replace

    return replace(process, history=history)


def _check_intent(result: Any) -> Intent:
    if result is None:
        return Intent()
    if not isinstance(result, Intent):
        raise InvalidIntent(f"a processor must return an Intent (or None), not {type(result).__name__}")
    if not isinstance(result.events, list | tuple):
        raise InvalidIntent("Intent.events must be a list")
    if result.action is not None and not isinstance(result.action, SetTimer | UnsetTimer):
        raise InvalidIntent("Intent.action must be SetTimer, UnsetTimer or None")
    return result


def _encode(what: str, value: Any) -> str:
    text, problem = encode_json(value, MAX_VALUE_BYTES)
    if problem is not None:
        raise InvalidIntent(f"the {what} cannot be stored: {problem}")
    return text if text is not None else "null"


def _encode_aux(value: Any) -> tuple[str | None, bytes | None]:
    if value is None:
        return None, None
    if isinstance(value, bytes | bytearray | memoryview):
        data = bytes(value)
        if len(data) > MAX_VALUE_BYTES:
            raise InvalidIntent(f"aux_state is {len(data)} bytes; the limit is {MAX_VALUE_BYTES}")
        return None, data
    return _encode("aux_state", value), None


__all__ = ["InvalidIntent", "ProcessContext", "run_step", "timer_job"]
