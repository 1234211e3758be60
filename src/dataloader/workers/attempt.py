"""One claimed attempt of a job: lock check, pipeline run, heartbeats, stop requests and the
fenced finish, all on the connection that holds the job's advisory lock."""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import asyncpg

from dataloader import metrics
from dataloader.logger.context_vars import bind_job
from dataloader.storage.db import is_connection_error
from dataloader.storage.repositories import AttemptConnection, ClaimedJob, FinishOutcome, FinishResult
from dataloader.workers.pipelines.context import JobContext, StopReason
from dataloader.workers.pipelines.errors import FatalError, JobStopped
from dataloader.workers.pipelines.registry import Pipeline

if TYPE_CHECKING:
    from dataloader.workers.base import EngineEnv

log = logging.getLogger("dataloader.worker")

_DONE = object()
_STOP_PRIORITY: dict[str | None, int] = {None: 0, "shutdown": 1, "cancel": 2, "lease_lost": 3}


@dataclass
class _Retry:
    """Growing pause between tries of a statement while the database is unreachable."""

    delay: float = 0.1
    limit: float = 5.0

    async def sleep(self) -> None:
        await asyncio.sleep(self.delay)
        self.delay = min(self.delay * 2, self.limit)


class Attempt:
    def __init__(self, job: ClaimedJob, conn: asyncpg.Connection, env: EngineEnv) -> None:
        self.job = job
        self.env = env
        self._conn: asyncpg.Connection | None = conn
        self._holds_lock = job.locked
        self._conn_lock = asyncio.Lock()
        self._pipeline: Pipeline | None = None
        self._pipeline_task: asyncio.Task[Any] | None = None
        self._forced = False
        self.ctx: JobContext | None = None
        self.stop_reason: StopReason | None = None
        self.log = log

    # -- stop requests (from the heartbeat, a cancel notification, or the manager) -----------------

    def request_stop(self, reason: StopReason) -> None:
        if _STOP_PRIORITY[reason] <= _STOP_PRIORITY[self.stop_reason]:
            return
        self.stop_reason = reason
        if self.ctx is not None:
            self.ctx.stop_reason = reason
        self.log.info("stop requested", extra={"reason": reason})
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
        with bind_job(job_id=str(job.job_id), queue=job.queue, task=job.task, attempt=job.attempt):
            await self._run()

    @property
    def connection(self) -> asyncpg.Connection | None:
        """The connection the attempt ended on (None if it was dropped)."""
        return self._conn

    @property
    def keeps_lock(self) -> bool:
        return self._holds_lock

    async def _run(self) -> None:
        job = self.job
        if not job.locked and not await self._settle_lock_busy():
            return

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
        self.log.info("job started", extra={"wait_sec": round(job.wait_sec, 4)})

        heartbeat = asyncio.create_task(self._heartbeat_loop(), name=f"heartbeat-{job.job_id}")
        started = time.perf_counter()
        self._pipeline_task = asyncio.create_task(self._call_pipeline(pipeline, self.ctx),
                                                  name=f"pipeline-{job.job_id}")
        try:
            await asyncio.wait({self._pipeline_task})
        finally:
            heartbeat.cancel()
            await asyncio.gather(heartbeat, return_exceptions=True)
        elapsed = time.perf_counter() - started
        metrics.JOB_RUN_SECONDS.labels(job.queue, job.task).observe(elapsed)
        await self._conclude(pipeline, self._pipeline_task, elapsed)

    async def _settle_lock_busy(self) -> bool:
        """The claim lost the race for the lock_key. Returns True if the lock is ours after all;
        otherwise the job is back in the queue (attempt not counted)."""
        job, settings = self.job, self.env.settings
        async with self._conn_lock:
            conn = await self._connection()
            running_holders, locked_now = await AttemptConnection(conn).lock_holders(job.job_id, job.lock_key)
        if locked_now:
            self._holds_lock = True
            return True
        # A running holder's finish wakes this job; only a stray holder (a fenced-off pipeline
        # still winding down) earns the full DL_CLAIM_BACKOFF_SEC.
        delay = 0.0 if running_holders else settings.claim_backoff_sec
        result = await self._finish("release", reason="lock_busy", delay_sec=delay)
        self._count("lock_busy")
        self.log.info("lock_key busy, job put back", extra={
            "lock_key": job.lock_key, "running_holders": running_holders, "retry_in_sec": delay})
        if delay:
            self._schedule_retry(result, delay)
        return False

    async def _conclude(self, pipeline: Pipeline, task: asyncio.Task[Any], elapsed: float) -> None:
        job = self.job
        exc: BaseException | None = JobStopped(self.stop_reason) if task.cancelled() else task.exception()
        reason = self.stop_reason
        extra = {"duration_sec": round(elapsed, 4)}

        if reason == "lease_lost":
            # The reaper may already have handed the job to someone else: this write is refused
            # if so (fenced) and only frees the lock; otherwise the job goes back to the queue.
            result = await self._finish("release", reason="lease_lost", delay_sec=0,
                                        keep_lock=self._thread_still_running())
            self._count("fenced" if result.status is None else "released")
            self.log.warning("attempt lost its lease; result discarded", extra=extra)
            return
        if exc is None:
            result = await self._finish("succeeded")
            outcome = "succeeded" if result.status == "succeeded" else "fenced"
            self._count(outcome)
            self.log.info("job succeeded" if outcome == "succeeded" else "finish refused (fenced off)",
                          extra=extra)
            return
        if isinstance(exc, JobStopped | asyncio.CancelledError) and reason is not None:
            if reason == "cancel":
                result = await self._finish("canceled", error="canceled by request")
                self._count("canceled" if result.status else "fenced")
                self.log.info("job canceled", extra=extra)
            else:
                result = await self._finish("release", reason="shutdown", delay_sec=0,
                                            keep_lock=self._thread_still_running())
                self._count("released" if result.status else "fenced")
                self.log.info("job put back to the queue for shutdown (attempt not counted)", extra=extra)
            return

        error = _describe(exc)
        fatal = isinstance(exc, FatalError)
        delay = 0.0 if fatal else max(0.0, float(pipeline.backoff(job.attempt)))
        result = await self._finish("error", error=error, fatal=fatal, max_attempts=pipeline.max_attempts,
                                    delay_sec=delay)
        if result.status == "queued":
            self._count("retried")
            self._schedule_retry(result, delay)
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

    # -- lease ---------------------------------------------------------------------------------------

    async def _heartbeat_loop(self) -> None:
        job = self.job
        period = min(self.env.settings.heartbeat_sec, job.lease_ttl_sec / 3)
        while True:
            await asyncio.sleep(period)
            started = time.perf_counter()
            try:
                async with self._conn_lock:
                    conn = await self._connection()
                    cancel = await AttemptConnection(conn).heartbeat(job.job_id, job.attempt)
            except Exception as exc:
                if not is_connection_error(exc):
                    self.log.exception("heartbeat failed")
                    continue
                self.log.warning("heartbeat lost the database connection; reconnecting")
                await self._reconnect()
                continue
            metrics.HEARTBEAT_SECONDS.labels(job.queue).observe(time.perf_counter() - started)
            if cancel is None:
                self.request_stop("lease_lost")
                return
            if cancel:
                self.request_stop("cancel")

    async def _report_progress(self, data: dict[str, Any]) -> None:
        if self.stop_reason == "lease_lost":
            raise JobStopped("lease_lost")
        try:
            async with self._conn_lock:
                conn = await self._connection()
                cancel = await AttemptConnection(conn).set_progress(self.job.job_id, self.job.attempt, data)
        except Exception as exc:
            if not is_connection_error(exc):
                raise
            # Progress is advisory: the heartbeat reconnects and keeps the lease; do not fail the job.
            self.log.warning("progress not stored: database unreachable", extra={"error": str(exc)})
            return
        if cancel is None:
            self.request_stop("lease_lost")
            raise JobStopped("lease_lost")
        if cancel:
            self.request_stop("cancel")

    async def _reconnect(self) -> None:
        """Replace a broken connection. The advisory lock died with it, so take it again; if the
        attempt was fenced off meanwhile, or someone else holds the key now, stop the pipeline."""
        retry = _Retry()
        async with self._conn_lock:
            await self._drop_connection()
            while True:
                conn = await self._connection()
                try:
                    locked = await AttemptConnection(conn).relock(self.job.job_id, self.job.attempt,
                                                                  self.job.lock_key)
                    break
                except Exception as exc:
                    await self._drop_connection()
                    if not is_connection_error(exc):
                        raise
                    await retry.sleep()
            if locked:
                self._holds_lock = True
        metrics.DB_RECONNECTS.labels("attempt").inc()
        if locked is None:
            self.log.warning("reconnected, but the attempt was fenced off meanwhile")
            self.request_stop("lease_lost")
        elif not locked:
            self.log.warning("reconnected, but another session holds the lock_key now")
            self.request_stop("lease_lost")
        else:
            self.log.info("reconnected and retook the lock_key")

    async def _connection(self) -> asyncpg.Connection:
        """The attempt's connection, acquiring a new one (patiently) if it was dropped."""
        retry = _Retry()
        while self._conn is None:
            try:
                self._conn = await self.env.pool.acquire()
            except Exception as exc:
                if not is_connection_error(exc):
                    raise
                await retry.sleep()
        return self._conn

    async def _drop_connection(self) -> None:
        """Close a connection whose state is unknown; never hand it back to the pool as usable."""
        conn, self._conn = self._conn, None
        self._holds_lock = False
        if conn is not None:
            conn.terminate()
            try:
                await self.env.pool.release(conn)
            except Exception:
                self.log.debug("release of a terminated connection failed", exc_info=True)

    # -- finish ------------------------------------------------------------------------------------

    async def _finish(self, outcome: FinishOutcome, *, keep_lock: bool = False, **kwargs: Any
                      ) -> FinishResult:
        """Write the end of the attempt, retrying through connection loss; unlock on the same
        connection in the same statement."""
        job = self.job
        retry = _Retry()
        while True:
            started = time.perf_counter()
            try:
                async with self._conn_lock:
                    conn = await self._connection()
                    result = await AttemptConnection(conn).finish(
                        job.job_id, job.attempt, outcome, lock_key=job.lock_key,
                        unlock=self._holds_lock and not keep_lock, **kwargs)
                    if not keep_lock:
                        self._holds_lock = False
                metrics.FINISH_SECONDS.labels(job.queue).observe(time.perf_counter() - started)
                return result
            except Exception as exc:
                await self._drop_connection()
                if not is_connection_error(exc):
                    raise
                self.log.warning("finish lost the database connection; retrying", extra={"error": str(exc)})
                await retry.sleep()

    def _schedule_retry(self, result: FinishResult, delay: float | None = None) -> None:
        if result.status == "queued":
            wait = delay if delay is not None else self.env.settings.claim_backoff_sec
            self.env.schedule_wakeup(self.job.queue, wait)

    def _count(self, outcome: str) -> None:
        metrics.JOBS_FINISHED.labels(self.job.queue, self.job.task, outcome).inc()


def _describe(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    return text[:4000]

