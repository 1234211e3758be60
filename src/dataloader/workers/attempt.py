"""One claimed attempt of a job: run its pipeline, watch for stop requests, and hand the outcome
to its queue worker, which writes it (fenced, batched) on the connection holding the job's lock."""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from dataloader import metrics
from dataloader.logger.context_vars import bind_job
from dataloader.storage.db import is_connection_error
from dataloader.storage.queue_connection import ClaimedJob, FinishOutcome, FinishRequest, FinishResult
from dataloader.workers.pipelines.context import JobContext, StopReason
from dataloader.workers.pipelines.errors import FatalError, JobStopped
from dataloader.workers.pipelines.registry import Pipeline, default_backoff

if TYPE_CHECKING:
    from dataloader.workers.env import EngineEnv

log = logging.getLogger("dataloader.worker")

_DONE = object()
# A progress write waits at most this long (a partitioned network would otherwise hold the
# pipeline until the driver's own timeouts); the next write will try again.
PROGRESS_TIMEOUT_SEC = 5.0
# The longest retry delay a backoff function may ask for (one year).
MAX_RETRY_DELAY_SEC = 365 * 24 * 3600.0
_STOP_PRIORITY: dict[str | None, int] = {None: 0, "shutdown": 1, "cancel": 2, "lease_lost": 3}

Finisher = Callable[[FinishRequest], Awaitable[FinishResult]]


class Attempt:
    def __init__(self, job: ClaimedJob, env: EngineEnv, finisher: Finisher) -> None:
        self.job = job
        self.env = env
        self._finisher = finisher
        self._pipeline: Pipeline | None = None
        self._pipeline_task: asyncio.Task[Any] | None = None
        self._forced = False
        self.ctx: JobContext | None = None
        self.stop_reason: StopReason | None = None
        self.log = log

    # -- stop requests (from the worker's heartbeat, a cancel notification, or the manager) -------

    def request_stop(self, reason: StopReason) -> None:
        if _STOP_PRIORITY[reason] <= _STOP_PRIORITY[self.stop_reason]:
            return
        self.stop_reason = reason
        if self.ctx is not None:
            self.ctx.stop_reason = reason
        self.log.info("stop requested", extra={"job_id": str(self.job.job_id), "reason": reason})
        # A plain coroutine has no chunks to stop between: interrupt it at its next await.
        # Generators stop at their next yield; shutdown lets plain coroutines run until the deadline.
        if (reason in ("cancel", "lease_lost") and self._pipeline is not None
                and self._pipeline.kind == "async" and self._pipeline_task is not None):
            self._pipeline_task.cancel()

    def force_stop(self) -> None:
        """The shutdown deadline passed: interrupt the pipeline wherever it is."""
        self.request_stop("shutdown")
        self._forced = True
        if self._pipeline_task is not None:
            self._pipeline_task.cancel()

    # -- the attempt -------------------------------------------------------------------------------

    async def run(self) -> None:
        job = self.job
        fields = {"job_id": str(job.job_id), "queue": job.queue, "task": job.task, "attempt": job.attempt}
        if job.request_id:
            fields["request_id"] = job.request_id
        with bind_job(**fields):
            await self._run()

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
        self._pipeline = pipeline
        self.ctx = JobContext(
            job_id=job.job_id, queue=job.queue, task=job.task, args=job.args, attempt=job.attempt,
            max_attempts=pipeline.max_attempts or job.max_attempts, lock_key=job.lock_key,
            partition_key=job.partition_key, report_progress=self._report_progress,
            log=logging.getLogger(f"dataloader.pipeline.{job.task}"), loop=asyncio.get_running_loop(),
        )
        self.ctx.stop_reason = self.stop_reason
        metrics.JOB_WAIT_SECONDS.labels(job.queue).observe(max(0.0, job.wait_sec))
        if self.log.isEnabledFor(logging.INFO):
            self.log.info("job started", extra={"wait_sec": round(job.wait_sec, 4)})

        started = time.perf_counter()
        self._pipeline_task = asyncio.create_task(self._call_pipeline(pipeline, self.ctx))
        await asyncio.wait({self._pipeline_task})
        elapsed = time.perf_counter() - started
        metrics.JOB_RUN_SECONDS.labels(job.queue, job.task).observe(elapsed)
        await self._conclude(pipeline, self._pipeline_task, elapsed)

    async def _conclude(self, pipeline: Pipeline, task: asyncio.Task[Any], elapsed: float) -> None:
        job = self.job
        exc: BaseException | None = JobStopped(self.stop_reason) if task.cancelled() else task.exception()
        reason = self.stop_reason
        extra = {"duration_sec": round(elapsed, 4)}

        if reason == "lease_lost":
            # The reaper may already have handed the job to someone else: this write is refused
            # if so (fenced) and only frees the lock; otherwise the job goes back to the queue.
            result = await self._finish("release", reason="lease_lost", keep_lock=self._thread_still_running())
            self._count("fenced" if result.status is None else "released")
            self.log.warning("attempt lost its lease; result discarded", extra=extra)
            return
        if exc is None and reason is not None and self.ctx is not None and self.ctx.stop_seen:
            # The pipeline returned after it saw the stop (a sync function that polled
            # ctx.stop_requested and returned): it may have stopped early, so the stop decides,
            # exactly as if it had raised JobStopped. One that never looked finished its work.
            exc = JobStopped(reason)
        if exc is None:
            result = await self._finish("succeeded")
            outcome = "succeeded" if result.status == "succeeded" else "fenced"
            self._count(outcome)
            if outcome != "succeeded":
                self.log.warning("finish refused (fenced off); result discarded", extra=extra)
            elif self.log.isEnabledFor(logging.INFO):
                self.log.info("job succeeded", extra=extra)
            return
        if isinstance(exc, JobStopped | asyncio.CancelledError) and reason is not None:
            if reason == "cancel":
                result = await self._finish("canceled", error="canceled by request")
                self._count("canceled" if result.status else "fenced")
                self.log.info("job canceled", extra=extra)
            else:
                result = await self._finish("release", reason="shutdown", keep_lock=self._thread_still_running())
                self._count("released" if result.status else "fenced")
                self.log.info("job put back to the queue for shutdown (attempt not counted)", extra=extra)
            return

        error = _describe(exc)
        fatal = isinstance(exc, FatalError)
        delay = 0.0 if fatal else retry_delay(pipeline, job.attempt, self.log)
        result = await self._finish("error", error=error, fatal=fatal, max_attempts=pipeline.max_attempts,
                                    delay_sec=delay)
        if result.status == "queued":
            self._count("retried")
            self.log.warning("job failed, will retry", extra={**extra, "error": error, "retry_in_sec": delay})
        elif result.status is None:
            self._count("fenced")
        else:
            self._count(result.status)
            self.log.error("job failed" + (" (fatal)" if fatal else ", no attempts left"),
                           extra={**extra, "error": error}, exc_info=exc if not fatal else None)

    async def _call_pipeline(self, pipeline: Pipeline, ctx: JobContext) -> None:
        func = pipeline.func
        if pipeline.kind == "async":
            await func(ctx)
        elif pipeline.kind == "async_gen":
            agen = func(ctx)
            try:
                async for _ in agen:
                    ctx.raise_if_stopped()
            finally:
                await agen.aclose()
        elif pipeline.kind == "sync":
            await asyncio.to_thread(func, ctx)
        else:
            gen = func(ctx)
            try:
                while await asyncio.to_thread(next, gen, _DONE) is not _DONE:
                    ctx.raise_if_stopped()
            finally:
                await asyncio.to_thread(gen.close)

    def _thread_still_running(self) -> bool:
        """A sync pipeline interrupted by force: its thread runs on, so its lock must stay held
        (the connection closes at process exit) or another worker could start the same key."""
        return self._forced and self._pipeline is not None and self._pipeline.kind in ("sync", "sync_gen")

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

    async def _finish(self, outcome: FinishOutcome, *, keep_lock: bool = False, error: str | None = None,
                      fatal: bool = False, max_attempts: int | None = None, delay_sec: float = 0.0,
                      reason: str | None = None) -> FinishResult:
        job = self.job
        return await self._finisher(FinishRequest(
            job_id=job.job_id, attempt=job.attempt, outcome=outcome, lock_key=job.lock_key, unlock=not keep_lock,
            error=error, fatal=fatal, max_attempts=max_attempts, delay_sec=delay_sec, reason=reason,
        ))

    def _count(self, outcome: str) -> None:
        metrics.JOBS_FINISHED.labels(self.job.queue, self.job.task, outcome).inc()


def retry_delay(pipeline: Pipeline, attempt: int, logger: logging.Logger = log) -> float:
    """Seconds before the next attempt: the pipeline's backoff, made safe to store. A backoff that
    raises or returns something that is not a finite number falls back to the default; the result
    is clamped to [0, MAX_RETRY_DELAY_SEC] so no value can overflow the database's interval."""
    try:
        delay = float(pipeline.backoff(attempt))
    except Exception as exc:
        logger.error("backoff function failed; using the default", extra={"error": _describe(exc)})
        delay = default_backoff(attempt)
    if math.isnan(delay):
        logger.error("backoff function returned NaN; using the default")
        delay = default_backoff(attempt)
    return min(max(delay, 0.0), MAX_RETRY_DELAY_SEC)


def _describe(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    return text[:4000]
