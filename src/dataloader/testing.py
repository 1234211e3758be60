"""Helpers for users' own test suites.

Two ways to test code built on dataloader, for two different questions:

- **Does my pipeline do the right thing?** `run_inline` runs one attempt of a pipeline in this
  process with a fake `JobContext`: no database, no worker. It drives the pipeline exactly as the
  engine does (an async generator chunk by chunk, a plain function or generator in a thread, the
  stop checked at every chunk boundary) and decides the outcome by the engine's rules, so a test
  can assert the outcome, the progress reports, the chunk count and the log lines, and can request
  a cancel or a shutdown at the n-th chunk to prove the pipeline stops cooperatively.

      from dataloader.testing import run_inline

      def test_load_cbr_reports_progress():
          result = run_inline("load.cbr", {"rows": 3000})
          assert result.outcome == "succeeded"
          assert result.progress == [{"done": 0}, {"done": 1000}, {"done": 2000}]

- **Does my system, jobs and all, reach the right state?** `drain` (async) and `drain_sync` (for a
  `SyncApp`) run the real engine in this process against your own database until the queue has
  nothing left to do, then stop, and return the jobs that finished, by status.

      async with App(settings) as app:
          await app.enqueue("load.cbr", {"rows": 10}, queue="load")
          result = await drain(app, "load")
          assert [job.task for job in result.succeeded] == ["load.cbr"]

- **Does my workflow take the right path over days of sleeps and signals?** `WorkflowTest` runs a
  workflow in memory with the test's own clock (dataloader.workflows.testing).

docs/testing.md has a worked pytest example of each.
"""

from __future__ import annotations

import asyncio
import json
import logging
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, Literal

from dataloader.app import App
from dataloader.config import Queue
from dataloader.exceptions import Cancel, DrainTimeout, UnknownTask
from dataloader.logger.context_vars import bind_job
from dataloader.model.chain import Stage
from dataloader.model.job import ACTIVE_STATUSES, FINISHED_STATUSES, Job, JobStatus
from dataloader.workers.chaining import plan_next_jobs
from dataloader.workers.outcome import decide, retry_delay
from dataloader.workers.pipelines.builtin import BUILTIN_PIPELINES
from dataloader.workers.pipelines.context import JobContext, StopReason
from dataloader.workers.pipelines.registry import Pipeline, PipelineRegistry, registry
from dataloader.workflows.testing import WorkflowTest

if TYPE_CHECKING:
    from dataloader.sync import SyncApp

__all__ = [
    "DrainResult",
    "DrainTimeout",
    "InlineResult",
    "WorkflowTest",
    "drain",
    "drain_sync",
    "run_inline",
    "run_inline_async",
]

Outcome = Literal["succeeded", "failed", "fatal", "stopped", "canceled", "snoozed"]
_DONE = object()


# -- run_inline ------------------------------------------------------------------------------------


@dataclass
class InlineResult:
    """What one inline attempt did.

    `outcome`: `succeeded` (`result`: what the job row would store, as JSON gives it back);
    `failed` (any exception, a `Retry`, or a return value that cannot be stored: `error` holds it,
    and `job_status` says whether the engine would retry: `queued` after `retry_in_sec`, `failed`
    on the last attempt, or `canceled` when a cancel was pending); `fatal` (a `FatalError`: the
    job fails at once); `stopped` (the pipeline stopped at a requested cancel or shutdown:
    `stop_reason` says which, `job_status` is `canceled` or `queued`); `canceled` (it returned or
    raised `Cancel`: `error` holds it); `snoozed` (it returned or raised `Snooze`: back to `queued`
    after `retry_in_sec`, the attempt not counted). The rules are the engine's own
    (`dataloader.workers.outcome.decide`).
    `progress`: every `ctx.progress(...)` report, in order. `chunks`: chunk boundaries passed (the
    `yield`s of a generator; 1 for a function that returned). `records`: the log records written
    through `ctx.log`.
    """

    outcome: Outcome
    job_status: JobStatus
    error: BaseException | None
    stop_reason: StopReason | None
    retry_in_sec: float | None
    progress: list[dict[str, Any]]
    chunks: int
    records: list[logging.LogRecord]
    context: JobContext
    result: Any = None
    # The stages a returned `Then` would enqueue (checked as the engine checks them).
    next_stages: tuple[Stage, ...] = ()
    # Its join (`Then(..., join=...)`): runs once every one of next_stages has ended.
    join_stage: Stage | None = None

    @property
    def succeeded(self) -> bool:
        return self.outcome == "succeeded"

    @property
    def last_progress(self) -> dict[str, Any] | None:
        """The progress the job row would hold at the end (the last report)."""
        return self.progress[-1] if self.progress else None

    @property
    def messages(self) -> list[str]:
        """The log messages, formatted, in order."""
        return [record.getMessage() for record in self.records]

    def raise_error(self) -> None:
        """Re-raise the pipeline's exception, if it raised one (handy for a traceback in a test)."""
        if self.error is not None:
            raise self.error


class _ListHandler(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@dataclass
class _Run:
    """The fake engine's side of one inline attempt."""

    ctx: JobContext | None = None
    reason: StopReason = "shutdown"
    stop_after_chunks: int | None = None
    stop_after_progress: int | None = None
    kind: str = "async"
    chunks: int = 0
    progress: list[dict[str, Any]] = field(default_factory=list)
    task: asyncio.Task[Any] | None = None

    def request_stop(self) -> None:
        """What Attempt.request_stop does: the flag for the pipeline, and a cancel interrupts a
        plain coroutine at its next await."""
        assert self.ctx is not None
        if self.ctx.stop_reason is not None:
            return
        self.ctx.stop_reason = self.reason
        if self.reason == "cancel" and self.kind == "async" and self.task is not None:
            self.task.cancel()

    async def report_progress(self, data: dict[str, Any]) -> None:
        # What the database would store (and refuse): the report as jsonb sees it.
        self.progress.append(json.loads(json.dumps(data)))
        if self.stop_after_progress is not None and len(self.progress) >= self.stop_after_progress:
            self.request_stop()

    def chunk_done(self) -> None:
        self.chunks += 1
        if self.stop_after_chunks is not None and self.chunks >= self.stop_after_chunks:
            self.request_stop()


def _resolve(target: str | Callable[..., Any], task: str | None, pipelines: PipelineRegistry | None) -> Pipeline:
    source = pipelines if pipelines is not None else registry
    if isinstance(target, str):
        found = source.get(target)
        if found is None and target in BUILTIN_PIPELINES:
            found = PipelineRegistry().register(target, BUILTIN_PIPELINES[target])
        if found is None:
            raise UnknownTask(f"no pipeline registered for task {target!r}: import the module that defines "
                              f"it first (registered: {', '.join(source.names()) or 'none'})")
        return found
    if not callable(target):
        raise TypeError(f"run_inline takes a task name or a pipeline function, got {type(target).__name__}")
    for name in source.names():  # a registered function keeps its name, max_attempts and backoff
        entry = source.get(name)
        if entry is not None and entry.func is target and (task is None or task == name):
            return entry
    return PipelineRegistry().register(task or getattr(target, "__qualname__", "inline"), target)


async def run_inline_async(
    pipeline: str | Callable[..., Any],
    args: Mapping[str, Any] | None = None,
    *,
    attempt: int = 1,
    max_attempts: int = 5,
    lock_key: str | None = None,
    queue: str = "default",
    partition_key: str = "",
    job_id: uuid.UUID | None = None,
    task: str | None = None,
    stop_after_chunks: int | None = None,
    stop_after_progress: int | None = None,
    cancel: bool = False,
    pipelines: PipelineRegistry | None = None,
    log_level: int = logging.DEBUG,
    max_result_bytes: int = 256 * 1024,
) -> InlineResult:
    """Run one attempt of `pipeline` (a task name, or the pipeline function) in this process with
    a fake `JobContext`; for async tests. `run_inline` is the same for sync tests.

    `args`, `attempt`, `max_attempts`, `lock_key`, `queue`, `partition_key`, `job_id` are what the
    context shows (a pipeline's own `max_attempts` wins, as in the engine). `max_result_bytes`:
    the largest result stored (the engine uses DL_MAX_ARGS_BYTES). Stop requests, as the
    engine would deliver them: `stop_after_chunks=n` requests a stop at the n-th chunk boundary
    (`0`: before the pipeline starts); `stop_after_progress=n` as the n-th progress report is
    stored (for plain functions that poll `ctx.stop_requested`). The stop is a shutdown, or a
    cancel with `cancel=True`; `cancel=True` alone requests the cancel before the start.

        result = await run_inline_async(load_cbr, {"rows": 10_000}, stop_after_chunks=2, cancel=True)
        assert result.outcome == "stopped" and result.job_status == "canceled"
        assert result.chunks == 2
    """
    if attempt < 1 or max_attempts < 1:
        raise ValueError("attempt and max_attempts must be >= 1")
    for name, value in (("stop_after_chunks", stop_after_chunks), ("stop_after_progress", stop_after_progress)):
        if value is not None and value < 0:
            raise ValueError(f"{name} must be >= 0")
    entry = _resolve(pipeline, task, pipelines)
    if cancel and stop_after_chunks is None and stop_after_progress is None:
        stop_after_chunks = 0
    run = _Run(reason="cancel" if cancel else "shutdown", stop_after_chunks=stop_after_chunks,
               stop_after_progress=stop_after_progress, kind=entry.kind)
    job_id = job_id or uuid.uuid4()
    logger = logging.getLogger(f"dataloader.pipeline.{entry.name}")
    ctx = JobContext(job_id=job_id, queue=queue, task=entry.name, args=json.loads(json.dumps(dict(args or {}))),
                     attempt=attempt, max_attempts=entry.max_attempts or max_attempts,
                     lock_key=lock_key or str(job_id), partition_key=partition_key,
                     report_progress=run.report_progress, log=logger, loop=asyncio.get_running_loop())
    run.ctx = ctx
    if stop_after_chunks == 0 or stop_after_progress == 0:
        run.request_stop()

    handler = _ListHandler()
    previous_level = logger.level
    logger.addHandler(handler)
    logger.setLevel(log_level)
    try:
        with bind_job(job_id=str(job_id), queue=queue, task=entry.name, attempt=attempt):
            run.task = asyncio.create_task(_call_pipeline(entry, ctx, run))
            await asyncio.wait({run.task})
    finally:
        logger.removeHandler(handler)
        logger.setLevel(previous_level)
    return _conclude(entry, run, run.task, ctx, handler.records, max_result_bytes)


def run_inline(pipeline: str | Callable[..., Any], args: Mapping[str, Any] | None = None, **options: Any
               ) -> InlineResult:
    """`run_inline_async` for sync tests (same arguments); it runs its own event loop, so call it
    where no loop is running.

        def test_import_rejects_bad_rows():
            result = run_inline("load.cbr", {"rows": -1})
            assert result.outcome == "fatal" and "rows" in str(result.error)
    """
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(run_inline_async(pipeline, args, **options))
    raise RuntimeError("run_inline was called inside a running event loop: use `await run_inline_async(...)`")


async def _call_pipeline(entry: Pipeline, ctx: JobContext, run: _Run) -> Any:
    """As Attempt._call_pipeline, counting chunks and delivering the requested stop."""
    func = entry.func
    if entry.kind == "async":
        value = await func(ctx)
        run.chunks = 1
        return value
    if entry.kind == "async_gen":
        agen = func(ctx)
        try:
            async for _ in agen:
                run.chunk_done()
                ctx.raise_if_stopped()
        finally:
            await agen.aclose()
    elif entry.kind == "sync":
        value = await asyncio.to_thread(func, ctx)
        run.chunks = 1
        return value
    else:
        gen = func(ctx)
        try:
            while await asyncio.to_thread(next, gen, _DONE) is not _DONE:
                run.chunk_done()
                ctx.raise_if_stopped()
        finally:
            await asyncio.to_thread(gen.close)
    return None


def _conclude(entry: Pipeline, run: _Run, task: asyncio.Task[Any], ctx: JobContext,
              records: list[logging.LogRecord], max_result_bytes: int) -> InlineResult:
    """The engine's decision (outcome.decide, as Attempt performs it) without the database."""
    reason = ctx.stop_reason
    interrupted = task.cancelled()
    raised = None if interrupted else task.exception()
    decision = decide(
        stop_reason=reason, stop_seen=ctx.stop_seen, interrupted=interrupted, raised=raised,
        returned=task.result() if not interrupted and raised is None else None,
        attempts_left=ctx.max_attempts - ctx.attempt,
        backoff=lambda: retry_delay(entry, ctx.attempt, logging.getLogger("dataloader.testing")),
        max_result_bytes=max_result_bytes,
        plan_next=lambda then, value: plan_next_jobs(
            queue=ctx.queue, lease_ttl_sec=60, planned=None, then=then, result=value,
            max_args_bytes=max_result_bytes),
    )

    def result(outcome: Outcome, status: JobStatus, error: BaseException | None = None,
               retry_in: float | None = None, value: Any = None) -> InlineResult:
        return InlineResult(outcome=outcome, job_status=status, error=error,
                            stop_reason=reason if outcome == "stopped" else None, retry_in_sec=retry_in,
                            progress=run.progress, chunks=run.chunks, records=records, context=ctx,
                            result=value)

    kind = decision.kind
    if kind == "succeeded":
        value = json.loads(decision.result_json) if decision.result_json is not None else None
        outcome = result("succeeded", JobStatus.succeeded, value=value)
        if not decision.next_stages:
            return outcome
        return replace(outcome, next_stages=decision.next_stages, join_stage=decision.join_stage)
    if kind == "snooze":
        return result("snoozed", JobStatus.queued, decision.exc, decision.delay_sec)
    if kind == "canceled":
        if decision.outcome == "error":  # failed while the cancel was pending: the cancel wins
            return result("failed", JobStatus.canceled, decision.exc)
        if isinstance(decision.exc, Cancel):
            return result("canceled", JobStatus.canceled, decision.exc)
        return result("stopped", JobStatus.canceled)
    if kind == "release":
        return result("stopped", JobStatus.queued)
    if kind == "retry":
        return result("failed", JobStatus.queued, decision.exc, decision.delay_sec)
    return result("fatal" if decision.fatal else "failed", JobStatus.failed, decision.exc)


# -- drain ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class DrainResult:
    """The jobs of the queue that finished while `drain` ran (full `Job` values, args included),
    by status, oldest first; and `remaining`: the queue's jobs still queued when it stopped
    (delayed past the timeout), as listings (without args)."""

    finished: dict[JobStatus, list[Job]]
    remaining: list[Job]

    @property
    def jobs(self) -> list[Job]:
        return sorted((job for jobs in self.finished.values() for job in jobs), key=lambda j: j.created_at)

    @property
    def succeeded(self) -> list[Job]:
        return self.finished.get(JobStatus.succeeded, [])

    @property
    def failed(self) -> list[Job]:
        return self.finished.get(JobStatus.failed, [])

    @property
    def canceled(self) -> list[Job]:
        return self.finished.get(JobStatus.canceled, [])

    @property
    def lost(self) -> list[Job]:
        return self.finished.get(JobStatus.lost, [])

    def counts(self) -> dict[str, int]:
        """{status: number of jobs}, only the statuses that occurred."""
        return {str(status): len(jobs) for status, jobs in self.finished.items() if jobs}


async def _all_jobs(app: App, **filters: Any) -> list[Job]:
    jobs: list[Job] = []
    cursor: str | None = None
    while True:
        page = await app.list(cursor=cursor, limit=500, **filters)
        jobs.extend(page.jobs)
        if page.next_cursor is None:
            return jobs
        cursor = page.next_cursor


async def drain(
    app: App,
    queue: str = "default",
    *,
    timeout: float = 30.0,
    concurrency: int | None = None,
    wait_for_delayed: bool = False,
    reaper: bool = False,
    poll_interval: float = 0.05,
) -> DrainResult:
    """Run the real engine in this process (`app.running([Queue(queue, concurrency)])`) until no
    job of `queue` is `running` or due, then stop the workers gracefully and return the jobs that
    finished meanwhile, by status.

    "Due" means runnable before the deadline (`timeout` seconds from now): a retry whose backoff
    ends within the timeout is waited for; a job delayed past it is left `queued` and reported in
    `remaining`. With `wait_for_delayed=True` every queued job is waited for, and one that cannot
    come due before the deadline raises `DrainTimeout` at once. If the deadline passes with work
    left, `DrainTimeout` carries what finished and what was pending.

    `concurrency` defaults to the settings' entry for the queue (else 4). The reaper is off by
    default (a test's own jobs do not need it); `reaper=True` also gives back expired leases.
    The queue's state is read every `poll_interval` seconds through `app.list`.

        async def test_orders_are_confirmed(app):
            job = await app.enqueue("orders.confirm", {"id": 7}, queue="orders")
            result = await drain(app, "orders", timeout=10)
            assert [j.id for j in result.succeeded] == [job.id]
    """
    if timeout <= 0 or poll_interval <= 0:
        raise ValueError("timeout and poll_interval must be > 0")
    if concurrency is None:
        concurrency = next((q.concurrency for q in app.settings.workers if q.queue == queue), 4)
    loop = asyncio.get_running_loop()
    deadline_at = loop.time() + timeout
    deadline = datetime.now(UTC) + timedelta(seconds=timeout)
    active = [s.value for s in ACTIVE_STATUSES]
    done = [s.value for s in FINISHED_STATUSES]
    # Every job that can finish during the drain is active now or created from now on; the margin
    # covers a database clock a little behind ours, and jobs finished before we started are left out.
    since = datetime.now(UTC) - timedelta(seconds=60)
    watched = {job.id for job in await _all_jobs(app, queue=queue, status=active)}
    finished_before = {job.id for job in await _all_jobs(app, queue=queue, status=done, created_from=since)}

    async def result(remaining: list[Job]) -> DrainResult:
        ids = watched | {job.id for job in await _all_jobs(app, queue=queue, status=done, created_from=since)}
        by_status: dict[JobStatus, list[Job]] = {}
        for job_id in ids - finished_before:
            job = await app.get(job_id)
            if job.status.finished:
                by_status.setdefault(job.status, []).append(job)
        for jobs in by_status.values():
            jobs.sort(key=lambda j: j.created_at)
        return DrainResult(by_status, remaining)

    async with app.running([Queue(queue, concurrency)], reaper=reaper):
        while True:
            jobs = await _all_jobs(app, queue=queue, status=active)
            watched.update(job.id for job in jobs)
            pending = [j for j in jobs if j.status == JobStatus.running or j.available_at <= deadline
                       or wait_for_delayed]
            if not pending:
                break
            late = [j for j in pending if j.status == JobStatus.queued and j.available_at > deadline]
            if late or loop.time() >= deadline_at:
                why = (f"{len(late)} job(s) of queue {queue!r} are delayed past the {timeout} s timeout"
                       if late else f"queue {queue!r} still had {len(pending)} job(s) to run after {timeout} s")
                partial = await result([])
                raise DrainTimeout(f"{why}: {', '.join(f'{j.id} ({j.task}, {j.status})' for j in pending[:5])}",
                                   partial, pending)
            await asyncio.sleep(poll_interval)
    return await result([j for j in jobs if j.status == JobStatus.queued])


def drain_sync(app: SyncApp, queue: str = "default", **options: Any) -> DrainResult:
    """`drain` for a `SyncApp` (same options), from sync code: the engine runs on the SyncApp's
    loop while this call waits.

        def test_orders_are_confirmed(sync_app):
            job = sync_app.enqueue("orders.confirm", {"id": 7}, queue="orders")
            assert [j.id for j in drain_sync(sync_app, "orders").succeeded] == [job.id]
    """
    return app.run(drain(app.app, queue, **options))
