"""The PG worker of one queue: `concurrency` slots that claim, run and finish jobs.

A slot claims on a pool connection; when it gets a job, that connection stays with the attempt
(it holds the lock_key's advisory lock) until the finish unlocks it. Idle slots hold no
connection and send no queries: they sleep on the queue's `Wakeup` until a NOTIFY, the due time
of a delayed job, or the bounded fallback poll.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass

import asyncpg

from dataloader import metrics
from dataloader.config import Settings
from dataloader.storage.db import is_connection_error
from dataloader.storage.queries import sql
from dataloader.storage.repositories import AttemptConnection, ClaimedJob
from dataloader.workers.attempt import Attempt
from dataloader.workers.pipelines.registry import PipelineRegistry
from dataloader.workers.wakeup import DueTimer, Wakeup

log = logging.getLogger("dataloader.worker")


@dataclass
class EngineEnv:
    """What every worker of a process shares."""

    pool: asyncpg.Pool
    registry: PipelineRegistry
    settings: Settings
    worker_name: str
    schedule_wakeup: Callable[[str, float], None]


class QueueWorker:
    def __init__(self, queue: str, concurrency: int, env: EngineEnv) -> None:
        self.queue = queue
        self.concurrency = concurrency
        self.env = env
        self.wakeup = Wakeup()
        self.timer = DueTimer(self.wakeup, env.settings.poll_fallback_sec, on_fire=self._count_timer)
        self.running: dict[uuid.UUID, Attempt] = {}
        self._claiming = True

    def _count_timer(self, source: str) -> None:
        metrics.WAKEUPS.labels(self.queue, source).inc()

    async def run(self) -> None:
        timer = asyncio.create_task(self.timer.run(), name=f"timer-{self.queue}")
        try:
            await asyncio.gather(*(self._slot(i) for i in range(self.concurrency)))
        finally:
            timer.cancel()
            await asyncio.gather(timer, return_exceptions=True)

    async def notify(self, source: str = "notify") -> None:
        metrics.WAKEUPS.labels(self.queue, source).inc()
        await self.wakeup.signal(1)

    async def stop_claiming(self) -> None:
        self._claiming = False
        await self.wakeup.signal_all()

    def stop_running(self, reason: str = "shutdown") -> None:
        for attempt in list(self.running.values()):
            attempt.request_stop(reason)  # type: ignore[arg-type]

    def force_stop(self) -> None:
        for attempt in list(self.running.values()):
            attempt.force_stop()

    async def _slot(self, index: int) -> None:
        delay = 0.1
        while self._claiming:
            seen = self.wakeup.generation
            try:
                claimed = await self._claim()
            except Exception as exc:
                if not is_connection_error(exc):
                    log.exception("claim failed", extra={"queue": self.queue})
                elif delay == 0.1:
                    log.warning("claim: database unreachable, retrying", extra={"queue": self.queue,
                                                                                "error": str(exc)})
                await self._pause(delay)
                delay = min(delay * 2, 5.0)
                continue
            if delay > 0.1:
                metrics.DB_RECONNECTS.labels("worker").inc()
                log.info("claim: database reachable again", extra={"queue": self.queue})
            delay = 0.1
            if claimed is None:
                await self.wakeup.wait(seen)
                continue
            job, conn = claimed
            if self._claiming:  # there may be more: let one sleeping sibling look
                metrics.WAKEUPS.labels(self.queue, "chain").inc()
                await self.wakeup.signal(1)
            attempt = Attempt(job, conn, self.env)
            self.running[job.job_id] = attempt
            metrics.RUNNING_JOBS.labels(self.queue).inc()
            try:
                await attempt.run()
            except Exception:
                log.exception("attempt crashed", extra={"job_id": str(job.job_id), "queue": self.queue})
            finally:
                metrics.RUNNING_JOBS.labels(self.queue).dec()
                self.running.pop(job.job_id, None)

    async def _claim(self) -> tuple[ClaimedJob, asyncpg.Connection] | None:
        conn = await self.env.pool.acquire()
        try:
            started = time.perf_counter()
            job = await AttemptConnection(conn).claim(self.queue, self.env.worker_name)
            metrics.CLAIM_SECONDS.labels(self.queue).observe(time.perf_counter() - started)
            if job is not None:
                return job, conn  # the connection now belongs to the attempt
            due_in = await conn.fetchval(sql("next_due_in"), self.queue)
        except BaseException:
            conn.terminate()
            await self.env.pool.release(conn)
            raise
        await self.env.pool.release(conn)
        if due_in is not None:
            self.timer.schedule_in(due_in)
        return None

    async def _pause(self, seconds: float) -> None:
        """Sleep, but wake early when the worker is told to stop."""
        seen = self.wakeup.generation
        try:
            await asyncio.wait_for(self.wakeup.wait(seen), timeout=seconds)
        except TimeoutError:
            pass
