"""One claimed attempt of a job: run its pipeline, watch for stop requests, and hand the outcome
to its queue worker, which writes it (fenced, batched) on the connection holding the job's lock.

What the outcome means is decided by `outcome.decide` (pure, unit-tested without a database);
this module only performs the decision: the finish request, the metric, the log line. It also
runs `ctx.transaction()`, the pipeline's own transaction that finishes the job at its commit.
"""

from __future__ import annotations

import asyncio
import contextvars
import json
import logging
import math
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

import asyncpg

from dataloader import metrics, tracing
from dataloader.exceptions import AttemptFenced, FatalError, JobStopped
from dataloader.logger.context_vars import bind_job, job_var
from dataloader.model.chain import Stage, Then
from dataloader.model.payload_crypto import Sealed
from dataloader.storage.db import is_connection_error
from dataloader.storage.queue_connection import ClaimedJob, FinishOutcome, FinishRequest, FinishResult
from dataloader.workers.chaining import plan_next_jobs
from dataloader.workers.outcome import MAX_RETRY_DELAY_SEC, Decision, decide, describe, retry_delay
from dataloader.workers.pipelines.context import JobContext, StopReason
from dataloader.workers.pipelines.registry import Pipeline

if TYPE_CHECKING:
    from dataloader.workers.env import EngineEnv

log = logging.getLogger("dataloader.worker")

_DONE = object()
# A progress write waits at most this long (a partitioned network would otherwise hold the
# pipeline until the driver's own timeouts); the next write will try again.
PROGRESS_TIMEOUT_SEC = 5.0
__all__ = ["MAX_RETRY_DELAY_SEC", "Attempt", "retry_delay"]  # the last two kept for older imports

# A timeout outranks a shutdown (the attempt overran: it counts as a failed attempt) and yields
# to a cancel or a lost lease.
_STOP_PRIORITY: dict[str | None, int] = {None: 0, "shutdown": 1, "timeout": 2, "cancel": 3, "lease_lost": 4}
# Pipelines kept alive past their limit in a thread: referenced until the thread ends.
_ABANDONED: set[asyncio.Task[Any]] = set()

Finisher = Callable[[FinishRequest], Awaitable[FinishResult]]
# Submits a finish and calls the callback with its result once it is durable (Completer.submit_later).
LaterFinisher = Callable[[FinishRequest, Callable[[FinishResult], None]], None]


class Attempt:
    def __init__(self, job: ClaimedJob, env: EngineEnv, finisher: Finisher) -> None:
        self.job = job
        self.env = env
        self._metrics = metrics.attempt_metrics(job.queue, job.task)
        self._finisher = finisher
        self._pipeline: Pipeline | None = None
        self._pipeline_task: asyncio.Task[Any] | None = None
        self._forced = False
        self.ctx: JobContext | None = None
        self.stop_reason: StopReason | None = None
        self.log = log
        # ctx.transaction(): None (not used), "open", "committing" (its finish matched; only the
        # COMMIT is left), or "committed" (the job ended at its commit).
        self._transaction: str | None = None
        # The run-time limit that stopped it (None: not timed out); whether a sync pipeline's
        # thread was left running past it (its lock_key stays held until the thread ends).
        self.timed_out: float | None = None
        self._abandoned = False
        self._span: Any = None  # the attempt's span (None: tracing off)
        self._trace_ids: dict[str, str] = {}  # its trace_id and span_id, for lines logged outside it
        self._past_limit_task: asyncio.Task[None] | None = None  # see `_limit_reached`
        # When (monotonic) the worker stops it unless a heartbeat renewed its lease (lease_guard.py).
        self.fence_at = math.inf
        # How long its pipeline ran (None: it did not run to an outcome): feeds claim_ahead.py.
        self.ran_sec: float | None = None

    # -- stop requests (from the worker's heartbeat, a cancel notification, or the manager) -------

    def request_stop(self, reason: StopReason) -> None:
        if self._transaction in ("committing", "committed"):
            # The job ends (or ended) with the pipeline's transaction: its finish matched, so the
            # row is ours until the COMMIT, and a heartbeat that finds it no longer running saw
            # that very commit. Interrupting the COMMIT would only leave its outcome unknown.
            return
        if _STOP_PRIORITY[reason] <= _STOP_PRIORITY[self.stop_reason]:
            return
        self.stop_reason = reason
        if self.ctx is not None:
            self.ctx.stop_reason = reason
        self.log.info("stop requested", extra=self.log_extra(reason=reason))
        # A plain coroutine has no chunks to stop between: interrupt it at its next await.
        # Generators stop at their next yield; shutdown lets plain coroutines run until the deadline.
        # A lost lease interrupts an async generator too, wherever it awaits: its next yield may be
        # behind I/O that waits out the same outage (a reconnect to a primary failing over), and the
        # reaper hands the lock_key to another holder when the lease runs out, not at that yield.
        interrupts = ("async", "async_gen") if reason == "lease_lost" else ("async",)
        if (reason in ("cancel", "lease_lost", "timeout") and self._pipeline is not None
                and self._pipeline.kind in interrupts and self._pipeline_task is not None):
            self._pipeline_task.cancel()

    def force_stop(self) -> None:
        """The shutdown deadline passed: interrupt the pipeline wherever it is."""
        self.request_stop("shutdown")
        self._forced = True
        if self._pipeline_task is not None:
            self._pipeline_task.cancel()

    # -- the attempt -------------------------------------------------------------------------------

    def _log_fields(self) -> dict[str, Any]:
        job = self.job
        fields = {"job_id": str(job.job_id), "queue": job.queue, "task": job.task, "attempt": job.attempt}
        if job.request_id:
            fields["request_id"] = job.request_id
        return fields

    def log_extra(self, **fields: Any) -> dict[str, Any]:
        """The fields of a line about this attempt logged from outside it (the worker's loop: a
        stop request, a self-fence, a crash): the job's fields and its trace's ids, as the lines
        logged inside it carry them from the context. Without them such a line names the job but
        not its trace."""
        return {**self._log_fields(), **self._trace_ids, **fields}

    async def run(self) -> None:
        job = self.job
        fields = self._log_fields()
        if not tracing.enabled():
            with bind_job(**fields):
                await self._run()
            return
        with tracing.attempt_span(queue=job.queue, job_id=str(job.job_id), task=job.task, attempt=job.attempt,
                                  traceparent=job.traceparent, wait_sec=job.wait_sec,
                                  previous=job.previous_span) as self._span, \
                bind_job(**fields):
            self._trace_ids = tracing.log_ids()
            await self._run()

    def start(self, submit_later: LaterFinisher, ended: Callable[[Attempt], None]) -> Coroutine[Any, Any, None] | None:
        """Start the attempt without a task of its own (tracing off): the pipeline runs in its
        task as always (so `asyncio.current_task()`, `asyncio.timeout()` and TaskGroups inside it
        work as before), and what the attempt task used to do around it is callbacks: the
        pipeline task's done callback decides the outcome and hands the finish to the completer
        with a callback instead of a future (`submit_later`), and `ended(self)` is called once
        that finish is durable. No attempt task, `asyncio.wait` or future per job: in a drain of
        short jobs those were most of the worker's Python per job (bench/README.md).
        A run-time limit is a timer; only an attempt that reaches it gets a task (`_past_limit`).
        Returns None then; otherwise (tracing on, or an unknown task) the coroutine of the whole
        attempt (`run`), for the caller to run in a task."""
        pipeline = self.env.registry.get(self.job.task)
        if pipeline is None or tracing.enabled():
            return self.run()
        job = self.job
        context = contextvars.copy_context()  # the attempt's own: the job's fields on every log line
        context.run(job_var.set, self._log_fields())
        ctx = context.run(self._begin, pipeline)
        loop = asyncio.get_running_loop()
        started = time.perf_counter()
        task = self._pipeline_task = asyncio.create_task(self._run_pipeline(pipeline, ctx), context=context)
        limit = job.timeout_sec if job.timeout_sec is not None else pipeline.timeout
        timer = None if limit is None else loop.call_later(
            limit, self._limit_reached, pipeline, task, limit, started, context, ended, context=context)
        task.add_done_callback(lambda _: self._pipeline_ended(pipeline, task, started, timer, submit_later, ended),
                               context=context)
        return None

    def _pipeline_ended(self, pipeline: Pipeline, task: asyncio.Task[Any], started: float,
                        timer: asyncio.TimerHandle | None, submit_later: LaterFinisher,
                        ended: Callable[[Attempt], None]) -> None:
        """The pipeline task's done callback (`start`): decide and submit the finish."""
        if timer is not None:
            timer.cancel()
        if self._past_limit_task is not None:
            return  # the attempt reached its run-time limit: `_past_limit` concludes it
        try:
            elapsed = time.perf_counter() - started
            self._metrics.run.observe(elapsed)
            self.ran_sec = elapsed
            interrupted = task.cancelled() or self._abandoned
            raised = None if interrupted else task.exception()
            d = self._decide(pipeline, interrupted, raised,
                             task.result() if not interrupted and raised is None else None)
            extra = {"duration_sec": round(elapsed, 4)}
            request = self._request_for(d, pipeline)
            if request is None:
                self._report(d, None, extra)
                ended(self)
                return
        except Exception:
            self.log.exception("attempt crashed")
            ended(self)
            return

        def durable(result: FinishResult) -> None:
            try:
                self._report(d, result.status, extra)
            finally:
                ended(self)

        # The completer calls back from its own task: the report runs in the attempt's context (a
        # copy: this one is entered right now), so its log lines carry the job's fields.
        attempt_context = contextvars.copy_context()
        submit_later(request, lambda result: attempt_context.run(durable, result))

    def _limit_reached(self, pipeline: Pipeline, task: asyncio.Task[Any], limit: float, started: float,
                       context: contextvars.Context, ended: Callable[[Attempt], None]) -> None:
        if not task.done():
            self._past_limit_task = asyncio.create_task(self._past_limit(pipeline, task, limit, started, ended),
                                                        context=context)

    async def _past_limit(self, pipeline: Pipeline, task: asyncio.Task[Any], limit: float, started: float,
                          ended: Callable[[Attempt], None]) -> None:
        """An attempt started by `start` reached its run-time limit: stop it (`_time_out`) and
        write its outcome, as `_await_pipeline` does for an attempt in a task."""
        try:
            await self._time_out(pipeline, task, limit)
            elapsed = time.perf_counter() - started
            self._metrics.run.observe(elapsed)
            self.ran_sec = elapsed
            await self._conclude(pipeline, task, elapsed)
        except Exception:
            self.log.exception("attempt crashed")
        finally:
            ended(self)

    def _begin(self, pipeline: Pipeline) -> JobContext:
        """The attempt's JobContext, the wait metric and the start line."""
        job = self.job
        self._pipeline = pipeline
        self.ctx = JobContext(
            job_id=job.job_id, queue=job.queue, task=job.task, args=job.args, attempt=job.attempt,
            max_attempts=pipeline.max_attempts or job.max_attempts, lock_key=job.lock_key,
            partition_key=job.partition_key, report_progress=self._report_progress,
            log=logging.getLogger(f"dataloader.pipeline.{job.task}"), loop=asyncio.get_running_loop(),
            open_transaction=self._open_transaction, db=self.env.pool,
        )
        self.ctx.stop_reason = self.stop_reason
        self._metrics.wait.observe(max(0.0, job.wait_sec))
        if self.log.isEnabledFor(logging.INFO):
            self.log.info("job started", extra={"wait_sec": round(job.wait_sec, 4)})
        return self.ctx

    async def _run(self) -> None:
        job = self.job
        pipeline = self.env.registry.get(job.task)
        if pipeline is None:
            error = (f"no pipeline registered for task {job.task!r} on this worker "
                     f"(registered: {', '.join(self.env.registry.names())})")
            await self._finish("error", error=error, fatal=True)
            self._count("failed")
            self.log.error("unknown task, job failed", extra={"error": error})
            return
        ctx = self._begin(pipeline)
        started = time.perf_counter()
        self._pipeline_task = asyncio.create_task(self._call_pipeline(pipeline, ctx))
        await self._await_pipeline(pipeline, started)

    async def _await_pipeline(self, pipeline: Pipeline, started: float) -> None:
        """Wait for the pipeline task within the run-time limit (counted from `started`), then
        write the outcome."""
        job = self.job
        task = self._pipeline_task
        assert task is not None
        limit = job.timeout_sec if job.timeout_sec is not None else pipeline.timeout
        wait = None if limit is None else max(0.0, limit - (time.perf_counter() - started))
        done, _ = await asyncio.wait({task}, timeout=wait)
        if not done:
            await self._time_out(pipeline, task, limit)  # type: ignore[arg-type]
        elapsed = time.perf_counter() - started
        self._metrics.run.observe(elapsed)
        self.ran_sec = elapsed
        await self._conclude(pipeline, task, elapsed)

    async def _time_out(self, pipeline: Pipeline, task: asyncio.Task[Any], limit: float) -> None:
        """The attempt ran past its run-time limit: stop it. A plain coroutine is cancelled at once
        (request_stop); a generator stops at its next yield, or is cancelled after the grace; a sync
        function (or a sync generator that does not yield within the grace) cannot be interrupted in
        its thread: the attempt ends without it, and its lock_key stays held on the control
        connection until the thread ends (then `_abandoned_thread_ended` releases it)."""
        self.request_stop("timeout")
        if self.stop_reason != "timeout":
            await asyncio.wait({task})  # a cancel or lost lease was already stopping it
            return
        self.timed_out = limit
        metrics.JOB_TIMEOUTS.labels(self.job.queue, self.job.task).inc()
        self.log.warning("run time limit exceeded; stopping the attempt", extra={"timeout_sec": limit})
        done, _ = await asyncio.wait({task}, timeout=self.env.settings.timeout_grace_sec)
        if done:
            return
        if pipeline.kind in ("sync", "sync_gen"):
            self._abandoned = True
            _ABANDONED.add(task)
            task.add_done_callback(self._abandoned_thread_ended)
            self.log.error("a sync pipeline ran past its run-time limit and cannot be interrupted in its "
                           "thread; the attempt ends now, its lock_key stays held until the thread ends",
                           extra={"timeout_sec": limit})
            return
        task.cancel()
        await asyncio.wait({task})

    def _abandoned_thread_ended(self, task: asyncio.Task[Any]) -> None:
        """The thread of a timed-out sync pipeline ended: release its lock_key now (an unlock-only
        finish, like a ctx.transaction() commit's: the job's row is not touched)."""
        _ABANDONED.discard(task)
        if not task.cancelled():
            task.exception()  # retrieved: it was reported as a timeout already
        job = self.job
        release = asyncio.ensure_future(self._finisher(FinishRequest(
            job_id=job.job_id, attempt=job.attempt, outcome="committed", lock_key=job.lock_key, unlock=True,
            lock_hash=job.lock_hash)))
        _ABANDONED.add(release)  # type: ignore[arg-type]
        release.add_done_callback(_ABANDONED.discard)  # type: ignore[arg-type]
        self.log.info("the thread of a timed-out pipeline ended; its lock_key is released")

    async def _conclude(self, pipeline: Pipeline, task: asyncio.Task[Any], elapsed: float) -> None:
        interrupted = task.cancelled() or self._abandoned
        raised = None if interrupted else task.exception()
        returned = task.result() if not interrupted and raised is None else None
        d = self._decide(pipeline, interrupted, raised, returned)
        extra = {"duration_sec": round(elapsed, 4)}
        request = self._request_for(d, pipeline)
        if request is None:
            self._report(d, None, extra)
            return
        result = await self._submit(request, d.outcome)
        self._report(d, result.status, extra)

    def _decide(self, pipeline: Pipeline, interrupted: bool, raised: BaseException | None,
                returned: Any) -> Decision:
        job = self.job
        max_attempts = pipeline.max_attempts or job.max_attempts
        decision = decide(
            stop_reason=self.stop_reason, stop_seen=self.ctx is not None and self.ctx.stop_seen,
            interrupted=interrupted, raised=raised, returned=returned,
            attempts_left=max_attempts - (job.attempt - job.attempts_before_retry),
            backoff=lambda: retry_delay(pipeline, job.attempt, self.log),
            committed=self._transaction == "committed", max_result_bytes=self.env.settings.max_args_bytes,
            timeout_sec=self.timed_out, plan_next=self._plan_next,
        )
        if decision.kind == "committed" and not interrupted and raised is None and isinstance(returned, Then):
            self.log.error("the pipeline returned Then after its ctx.transaction() committed: the job had "
                           "already ended, so those stages are not enqueued (pass then= to ctx.transaction())")
        return decision

    def _request_for(self, d: Decision, pipeline: Pipeline) -> FinishRequest | None:
        """The finish request that writes the decision; None for a job its pipeline's
        ctx.transaction() already finished (its lock was released right after the commit)."""
        if d.kind == "committed":
            return None
        return self._request(
            d.outcome, keep_lock=(d.outcome == "release" or self._abandoned) and self._thread_still_running(),
            error=d.error,
            fatal=d.fatal, max_attempts=pipeline.max_attempts if d.outcome == "error" else None,
            delay_sec=d.delay_sec, reason=d.reason, result_json=d.result_json, next_json=d.next_json)

    def _report(self, d: Decision, status: str | None, extra: dict[str, Any]) -> None:
        """Count and log the decision, once its finish is durable (`status`: what the finish
        statement wrote; None: refused, the attempt had been fenced off). The finish statement has
        the last word: it refuses a fenced-off attempt and cancels a job whose cancel was requested
        meanwhile instead of retrying it."""
        if d.kind == "committed":
            # Finished by the pipeline's transaction, lock released right after its commit.
            self._count("succeeded")
            if d.exc is not None:
                self.log.warning("pipeline raised after its transaction committed; the job stays succeeded",
                                 extra={**extra, "error": describe(d.exc)})
            elif self.log.isEnabledFor(logging.INFO):
                self.log.info("job succeeded (finished by its transaction)", extra=extra)
            return
        if status is None:
            self._count("fenced")
            if d.reason == "lease_lost":
                self.log.warning("attempt lost its lease; result discarded", extra=extra)
            else:
                self.log.warning("finish refused (fenced off); result discarded", extra=extra)
            return
        if d.outcome == "error":
            self._count("retried" if status == "queued" else status)
            if d.reason == "timeout":
                self.log.warning("job timed out" + (", will retry" if status == "queued" else ""),
                                 extra={**extra, "error": d.error, "retry_in_sec": d.delay_sec})
            elif status == "queued":
                self.log.warning("job failed, will retry",
                                 extra={**extra, "error": d.error, "retry_in_sec": d.delay_sec})
            else:
                self.log.error("job failed" + (" (fatal)" if d.fatal else ", no attempts left"),
                               extra={**extra, "error": d.error}, exc_info=d.exc if not d.fatal else None)
            return
        if d.kind == "succeeded":
            self._count("succeeded")
            if d.next_json is not None:
                for row in json.loads(d.next_json):
                    metrics.jobs_enqueued(row["queue"], row["task"]).inc()
            if self.log.isEnabledFor(logging.INFO):
                self.log.info("job succeeded", extra=extra)
        elif d.kind == "canceled" or status == "canceled":
            self._count("canceled")
            self.log.info("job canceled", extra={**extra, "error": d.error})
        elif d.kind == "snooze":
            self._count("snoozed")
            self.log.info("job snoozed (attempt not counted)", extra={**extra, "retry_in_sec": d.delay_sec})
        elif d.reason == "lease_lost":
            self._count("released")
            self.log.warning("attempt lost its lease; result discarded", extra=extra)
        else:
            self._count("released")
            self.log.info("job put back to the queue for shutdown (attempt not counted)", extra=extra)

    async def _call_pipeline(self, pipeline: Pipeline, ctx: JobContext) -> Any:
        """Run the pipeline; a plain function or coroutine's return value is returned (a generator's
        is not: an async generator cannot return one, and a chunked pipeline has no last value)."""
        if self._span is None:
            return await self._run_pipeline(pipeline, ctx)
        # its own task's context: the pipeline's spans (and its thread's) are children of `run`
        with tracing.child_span(f"run {pipeline.name}"):
            return await self._run_pipeline(pipeline, ctx)

    async def _run_pipeline(self, pipeline: Pipeline, ctx: JobContext) -> Any:
        if type(ctx.args) is Sealed:  # args under a key this node lacks: this job fails, the node goes on
            raise FatalError(ctx.args.problem)
        func = pipeline.func
        if pipeline.kind == "async":
            return await func(ctx)
        if pipeline.kind == "async_gen":
            agen = func(ctx)
            try:
                async for _ in agen:
                    ctx.raise_if_stopped()
            finally:
                await agen.aclose()
        elif pipeline.kind == "sync":
            return await asyncio.to_thread(func, ctx)
        else:
            gen = func(ctx)
            try:
                while await asyncio.to_thread(next, gen, _DONE) is not _DONE:
                    ctx.raise_if_stopped()
            finally:
                await asyncio.to_thread(gen.close)
        return None

    def _plan_next(self, then: Then | None, result: Any) -> str | None:
        """The jobs this attempt's success enqueues (chains): a returned `Then`, else the stages
        planned at enqueue. Raises ValueError for a stage that cannot be enqueued."""
        job = self.job
        if then is None and not job.chain_next:
            return None
        registry = self.env.registry

        def pipeline_max_attempts(task: str) -> int | None:
            entry = registry.get(task)
            return entry.max_attempts if entry is not None else None

        return plan_next_jobs(queue=job.queue, lease_ttl_sec=job.lease_ttl_sec, planned=job.chain_next,
                              then=then, result=result, max_args_bytes=self.env.settings.max_args_bytes,
                              pipeline_max_attempts=pipeline_max_attempts)

    def _thread_still_running(self) -> bool:
        """A sync pipeline interrupted by force: its thread runs on, so its lock must stay held
        (the connection closes at process exit) or another worker could start the same key."""
        return self._abandoned or (self._forced and self._pipeline is not None
                                   and self._pipeline.kind in ("sync", "sync_gen"))

    async def _report_progress(self, data: dict[str, Any]) -> None:
        if self.stop_reason == "lease_lost":
            raise JobStopped("lease_lost")
        try:
            async with asyncio.timeout(PROGRESS_TIMEOUT_SEC):
                cancel = await self.env.repo.set_progress(self.job.job_id, self.job.attempt, data)
        except Exception as exc:
            if not is_connection_error(exc):
                raise
            # Progress is advisory: the worker keeps the lease through the outage (heartbeats ride
            # it out on the control connection), so a database restart must not fail the attempt.
            self.log.warning("progress not stored: database unreachable",
                             extra={"error": f"{type(exc).__name__}: {exc}"})
            return
        if cancel is None:
            self.request_stop("lease_lost")
            raise JobStopped("lease_lost")
        if cancel:
            self.request_stop("cancel")

    @asynccontextmanager
    async def _open_transaction(self, then: Then | Stage | None = None) -> AsyncIterator[asyncpg.Connection]:
        """ctx.transaction(): a pool connection in a transaction that, as it commits, finishes the
        job (`finish_in_transaction.sql`, fenced on job, attempt and `running`). A fenced-off
        attempt's finish matches no row: AttemptFenced rolls everything back. After the commit
        the lock_key is released at once on the control connection (a session lock held there),
        and the attempt writes no finish of its own."""
        if self._transaction is not None:
            raise RuntimeError("ctx.transaction() finishes the job: use it once per attempt")
        if self.stop_reason == "lease_lost":
            raise AttemptFenced("the attempt lost its lease before the transaction began")
        job = self.job
        if isinstance(then, Stage):
            then = Then(then)
        # Checked before the block runs: a stage that cannot be enqueued fails the attempt with
        # nothing written. The result is NULL here (the job ends at the commit, before it returns).
        next_json = self._plan_next(then, None)
        self._transaction = "open"
        try:
            async with self.env.pool.acquire() as conn, conn.transaction():
                yield conn
                if not await self.env.repo.finish_in_transaction(conn, job.job_id, job.attempt, next_json,
                                                                 tracing.traceparent_of(self._span)):
                    raise AttemptFenced(f"job {job.job_id} attempt {job.attempt} is no longer running "
                                        "(its lease expired and it was taken back); the transaction "
                                        "was rolled back")
                self._transaction = "committing"
        except AttemptFenced:
            self._transaction = None
            self.log.warning("transaction refused at commit: attempt fenced off; rolled back")
            self.request_stop("lease_lost")
            raise
        except BaseException:
            # Rolled back (or, if the COMMIT itself failed, unknown: the attempt's own finish is
            # fenced on `running`, so it cannot overwrite a commit that did land).
            self._transaction = None
            raise
        self._transaction = "committed"
        # The job's row is final; release its lock_key now (and wake the key's waiters) rather
        # than when the pipeline returns, so the next job of the key is not held back.
        await self._finish("committed")

    def _request(self, outcome: FinishOutcome, *, keep_lock: bool = False, error: str | None = None,
                 fatal: bool = False, max_attempts: int | None = None, delay_sec: float = 0.0,
                 reason: str | None = None, result_json: str | None = None,
                 next_json: str | None = None) -> FinishRequest:
        job = self.job
        return FinishRequest(
            job_id=job.job_id, attempt=job.attempt, outcome=outcome, lock_key=job.lock_key, unlock=not keep_lock,
            error=error, fatal=fatal, max_attempts=max_attempts, delay_sec=delay_sec, reason=reason,
            result_json=result_json, next_json=next_json, span=tracing.traceparent_of(self._span),
        )

    async def _finish(self, outcome: FinishOutcome, **fields: Any) -> FinishResult:
        return await self._submit(self._request(outcome, **fields), outcome)

    async def _submit(self, request: FinishRequest, outcome: FinishOutcome) -> FinishResult:
        if self._span is None:
            return await self._finisher(request)
        with tracing.child_span("finish", {"dataloader.job.finish": outcome}) as span:
            result = await self._finisher(request)
            tracing.set_attribute(span, "dataloader.job.status", result.status or "fenced")
            return result

    def _count(self, outcome: str) -> None:
        self._metrics.finished(outcome)
        if self._span is not None:
            tracing.end_attempt(self._span, outcome)

