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
from dataclasses import dataclass, field

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
    quarantine: list[asyncpg.Connection] = field(default_factory=list)


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
        """One unit of concurrency. It keeps one connection for its whole life (no pool round trip
        per job); the connection goes to the attempt it claims and comes back when it ends."""
        delay = 0.1
        conn: asyncpg.Connection | None = None
        try:
            while self._claiming:
                seen = self.wakeup.generation
                try:
                    if conn is None:
                        conn = await self.env.pool.acquire()
                    job = await self._claim(conn)
                except Exception as exc:
                    conn = await _discard(self.env.pool, conn)
                    if not is_connection_error(exc):
                        log.exception("claim failed", extra={"queue": self.queue})
                    elif delay == 0.1:
                        log.warning("claim: database unreachable, retrying",
                                    extra={"queue": self.queue, "error": str(exc)})
                    await self._pause(delay)
                    delay = min(delay * 2, 5.0)
                    continue
                if delay > 0.1:
                    metrics.DB_RECONNECTS.labels("worker").inc()
                    log.info("claim: database reachable again", extra={"queue": self.queue})
                delay = 0.1
                if job is None:
                    await self.wakeup.wait(seen)
                    continue
                if self._claiming:  # there may be more: let one sleeping sibling look
                    metrics.WAKEUPS.labels(self.queue, "chain").inc()
                    await self.wakeup.signal(1)
                conn = await self._run_attempt(job, conn)
        finally:
            if conn is not None:
                await self.env.pool.release(conn)

    async def _run_attempt(self, job: ClaimedJob, conn: asyncpg.Connection) -> asyncpg.Connection | None:
        """Run one attempt; returns the connection to keep claiming on (None: get a new one)."""
        attempt = Attempt(job, conn, self.env)
        self.running[job.job_id] = attempt
        metrics.RUNNING_JOBS.labels(self.queue).inc()
        try:
            await attempt.run()
        except Exception:
            log.exception("attempt crashed", extra={"job_id": str(job.job_id), "queue": self.queue})
            return await _discard(self.env.pool, attempt.connection)
        finally:
            metrics.RUNNING_JOBS.labels(self.queue).dec()
            self.running.pop(job.job_id, None)
        if attempt.keeps_lock:
            # A forced-stopped sync pipeline still runs in its thread: the connection keeps the
            # lock_key locked until the process exits, so it is never used (or released) again.
            self.env.quarantine.append(attempt.connection)
            return None
        return attempt.connection

    async def _claim(self, conn: asyncpg.Connection) -> ClaimedJob | None:
        started = time.perf_counter()
        job = await AttemptConnection(conn).claim(self.queue, self.env.worker_name)
        metrics.CLAIM_SECONDS.labels(self.queue).observe(time.perf_counter() - started)
        if job is None:
            due_in = await conn.fetchval(sql("next_due_in"), self.queue)
            if due_in is not None:
                self.timer.schedule_in(due_in)
        return job

    async def _pause(self, seconds: float) -> None:
        """Sleep, but wake early when the worker is told to stop."""
        seen = self.wakeup.generation
        try:
            await asyncio.wait_for(self.wakeup.wait(seen), timeout=seconds)
        except TimeoutError:
            pass


async def _discard(pool: asyncpg.Pool, conn: asyncpg.Connection | None) -> None:
    """Close a connection in an unknown state (it may hold a lock) instead of reusing it."""
    if conn is not None:
        conn.terminate()
        try:
            await pool.release(conn)
        except Exception:
            log.debug("release of a terminated connection failed", exc_info=True)
