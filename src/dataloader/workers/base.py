"""The PG worker of one queue: claims, heartbeats and finishes in batches on one control
connection, and runs up to `concurrency` attempts at once.

Why one control connection: a lock_key's advisory lock is a session lock, so the statement that
claims a job, the heartbeats and the finish that releases the lock must use one connection. With
all of a queue's jobs on the same connection, a single round trip claims many jobs and another
finishes many, instead of two round trips (and two commits) per job. The worker's loop does, in
order: flush finished attempts, heartbeat if due, claim for free slots if there may be work. Idle,
it sends nothing: it sleeps until a NOTIFY for its queue, the due time of a delayed job, a finished
attempt, or the bounded fallback poll.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from dataclasses import dataclass, field, replace

import asyncpg

from dataloader import metrics
from dataloader.config import Settings
from dataloader.storage.db import is_connection_error
from dataloader.storage.queue_connection import (
    ClaimedJob,
    FinishRequest,
    FinishResult,
    QueueConnection,
    SkippedCandidate,
)
from dataloader.storage.repositories import JobRepository
from dataloader.workers.attempt import Attempt
from dataloader.workers.pipelines.registry import PipelineRegistry
from dataloader.workers.wakeup import DueTimer

log = logging.getLogger("dataloader.worker")

MAX_BATCH = 64


@dataclass
class EngineEnv:
    """What every worker of a process shares."""

    pool: asyncpg.Pool
    repo: JobRepository
    registry: PipelineRegistry
    settings: Settings
    worker_name: str
    quarantine: list[asyncpg.Connection] = field(default_factory=list)


class QueueWorker:
    def __init__(self, queue: str, concurrency: int, env: EngineEnv) -> None:
        self.queue = queue
        self.concurrency = concurrency
        self.env = env
        self.timer = DueTimer(env.settings.poll_fallback_sec, on_fire=self._timer_fired)
        self.running: dict[uuid.UUID, Attempt] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._finishes: list[tuple[FinishRequest, asyncio.Future[FinishResult]]] = []
        self._held: dict[int, uuid.UUID] = {}  # lock hash -> job whose lock the control connection holds
        self._control: asyncpg.Connection | None = None
        self._locks_lost = False
        self._wake = asyncio.Event()
        self._claiming = True
        self._work_generation = 1  # bumped by every hint of new work
        self._settled_generation = 0  # the hints a claim already answered (it came back short)
        self._next_heartbeat: float | None = None
        self._flushed: tuple[list, list[FinishRequest], dict[uuid.UUID, FinishResult]] | None = None
        self._busy: list[SkippedCandidate] = []
        self._reentrant: list[ClaimedJob] = []
        self._claimed: list[ClaimedJob] = []

    # -- signals from outside ----------------------------------------------------------------------

    async def notify(self, source: str = "notify") -> None:
        metrics.WAKEUPS.labels(self.queue, source).inc()
        self._hint_work()

    def _timer_fired(self, source: str) -> None:
        metrics.WAKEUPS.labels(self.queue, source).inc()
        self._hint_work()

    def _hint_work(self) -> None:
        self._work_generation += 1
        self._wake.set()

    async def stop_claiming(self) -> None:
        self._claiming = False
        self._wake.set()

    def stop_running(self, reason: str = "shutdown") -> None:
        for attempt in list(self.running.values()):
            attempt.request_stop(reason)  # type: ignore[arg-type]

    def force_stop(self) -> None:
        for attempt in list(self.running.values()):
            attempt.force_stop()

    # -- the loop ----------------------------------------------------------------------------------

    async def run(self) -> None:
        timer = asyncio.create_task(self.timer.run(), name=f"timer-{self.queue}")
        delay = 0.1
        try:
            while self._claiming or self.running or self._finishes:
                if not self._has_work_now():
                    try:
                        await asyncio.wait_for(self._wake.wait(), timeout=self._until_heartbeat())
                    except TimeoutError:
                        pass
                self._wake.clear()
                try:
                    conn = await self._control_connection()
                    await self._step(conn)
                except Exception as exc:
                    await self._drop_control()
                    if not is_connection_error(exc):
                        log.exception("queue worker step failed", extra={"queue": self.queue})
                    elif delay == 0.1:
                        log.warning("database unreachable, retrying", extra={"queue": self.queue,
                                                                             "error": str(exc)})
                    await self._pause(delay)
                    delay = min(delay * 2, 5.0)
                    continue
                if delay > 0.1:
                    metrics.DB_RECONNECTS.labels("worker").inc()
                    log.info("database reachable again", extra={"queue": self.queue})
                delay = 0.1
        finally:
            timer.cancel()
            for task in list(self._tasks):
                task.cancel()
            await asyncio.gather(timer, *self._tasks, return_exceptions=True)
            await self._release_control()

    async def _step(self, conn: asyncpg.Connection) -> None:
        """Flush finished attempts, heartbeat if due, claim if there may be work. When more than one
        is due they share one transaction: one commit (one WAL flush) instead of one each. A failed
        step drops the connection (and with it every lock it held), so no partial effect of a
        rolled-back step survives: session locks ignore rollbacks, terminated sessions do not.
        Claimed jobs whose lock_key turned out busy are settled after the commit, in statements of
        their own, so the step's row locks are never held while waiting on another worker."""
        self._flushed = None
        self._busy = []
        self._reentrant = []
        self._claimed = []
        flush, beat, claim = bool(self._finishes), self._heartbeat_due(), self._want_claim()
        if flush + beat + claim > 1:
            async with conn.transaction():
                await self._step_parts(conn, flush, beat, claim)
        else:
            await self._step_parts(conn, flush, beat, claim)
        self._resolve_flushed()
        claimed, self._claimed = self._claimed, []
        for job in claimed:
            self._start(job)
        reentrant, self._reentrant = self._reentrant, []
        for job in reentrant:
            await self._settle_reentrant(conn, job)
        busy, self._busy = self._busy, []
        for candidate in busy:
            await self._settle_busy(conn, candidate)

    async def _step_parts(self, conn: asyncpg.Connection, flush: bool, beat: bool, claim: bool) -> None:
        if flush:
            await self._flush_finishes(conn)
        if beat:
            await self._heartbeat(conn)
        if claim:
            await self._claim(conn)

    def _has_work_now(self) -> bool:
        return bool(self._finishes) or self._want_claim() or self._heartbeat_due()

    def _busy_slots(self) -> int:
        """Attempts still executing. One whose finish is waiting to be written has stopped
        executing: its slot is free, so the step that writes its finish can claim its successor
        (one commit for both)."""
        return len(self.running) - len(self._finishes)

    def _want_claim(self) -> bool:
        return (self._claiming and self._busy_slots() < self.concurrency
                and self._work_generation != self._settled_generation)

    async def _pause(self, seconds: float) -> None:
        try:
            await asyncio.wait_for(self._wake.wait(), timeout=seconds)
        except TimeoutError:
            pass

    # -- control connection ------------------------------------------------------------------------

    async def _control_connection(self) -> asyncpg.Connection:
        if self._control is None:
            self._control = await self.env.pool.acquire()
            if self._locks_lost:
                await self._relock(self._control)
        return self._control

    async def _relock(self, conn: asyncpg.Connection) -> None:
        """The previous connection died and its advisory locks with it: take them again. An
        attempt fenced off meanwhile, or whose key someone else took, is stopped."""
        holders = {job_id: h for h, job_id in self._held.items()}
        attempts = [(a.job.job_id, a.job.attempt, a.job.lock_key) for a in self.running.values()
                    if a.job.job_id in holders]
        results = await QueueConnection(conn).relock(attempts) if attempts else {}
        self._locks_lost = False
        self._held.clear()
        for job_id, (alive, locked) in results.items():
            attempt = self.running[job_id]
            if alive and locked:
                self._held[attempt.job.lock_hash] = job_id
            else:
                if locked:  # taken although fenced off: give it back at once
                    await QueueConnection(conn).unlock(attempt.job.lock_key)
                log.warning("after reconnect the attempt is no longer ours; stopping it",
                            extra={"job_id": str(job_id), "fenced": not alive})
                attempt.request_stop("lease_lost")
        metrics.DB_RECONNECTS.labels("locks").inc()
        log.info("reconnected and retook lock_keys", extra={"queue": self.queue, "held": len(self._held)})

    async def _drop_control(self) -> None:
        conn, self._control = self._control, None
        if conn is None:
            return
        if self._held:
            self._locks_lost = True
        # After a connection loss asyncpg may already have detached it from the pool; then both
        # calls refuse, and there is nothing left to close.
        try:
            conn.terminate()
            await self.env.pool.release(conn)
        except Exception:
            log.debug("dropping the control connection failed", exc_info=True)

    async def _release_control(self) -> None:
        conn, self._control = self._control, None
        if conn is None:
            return
        if self._held:
            # A forced-stopped sync pipeline still runs in its thread: keep its lock_key locked
            # until the process exits, so never reuse or release this connection.
            self.env.quarantine.append(conn)
            return
        try:
            await self.env.pool.release(conn)
        except Exception:
            log.debug("release of the control connection failed", exc_info=True)

    # -- claim -------------------------------------------------------------------------------------

    async def _claim(self, conn: asyncpg.Connection) -> None:
        generation = self._work_generation
        want = min(self.concurrency - self._busy_slots(), MAX_BATCH)
        queue_conn = QueueConnection(conn)
        started = time.perf_counter()
        batch = await queue_conn.claim(self.queue, self.env.worker_name, want)
        metrics.CLAIM_SECONDS.labels(self.queue).observe(time.perf_counter() - started)
        if batch.candidates < want:
            # The queue had no more runnable jobs than these: sleep until a new hint. (Skipped
            # candidates do not count as settled work: a full batch with skips claims again.)
            self._settled_generation = generation
            if not batch.candidates:
                due_in = await queue_conn.next_due_in(self.queue)
                if due_in is not None:
                    self.timer.schedule_in(due_in)
        for job in batch.claimed:
            if job.lock_hash not in self._held:
                self._held[job.lock_hash] = job.job_id
                self._claimed.append(job)  # started once the step has committed
            else:
                self._reentrant.append(job)
        for candidate in batch.skipped:
            if candidate.lock_busy:
                self._busy.append(candidate)
            else:
                metrics.CLAIM_SKIPPED.labels(self.queue, "same_key_in_batch").inc()

    async def _settle_reentrant(self, conn: asyncpg.Connection, job: ClaimedJob) -> None:
        """A claimed job whose lock this session already held: the re-entrant grant gave the key to
        a second job (an attempt of ours still stopping after it was fenced off, or two keys with
        one hashtext). Undo the extra lock count and put the job back without using an attempt."""
        holder = self.running.get(self._held.get(job.lock_hash))  # type: ignore[arg-type]
        live_holder = holder is not None and holder.stop_reason != "lease_lost"
        delay = 0.0 if live_holder else self.env.settings.claim_backoff_sec
        result = await QueueConnection(conn).finish_one(FinishRequest(
            job_id=job.job_id, attempt=job.attempt, outcome="release", lock_key=job.lock_key, unlock=True,
            reason="lock_busy", delay_sec=delay))
        metrics.CLAIM_SKIPPED.labels(self.queue, "lock_held_by_us").inc()
        log.info("lock_key held by this worker, job put back", extra={
            "job_id": str(job.job_id), "lock_key": job.lock_key, "live_holder": live_holder, "retry_in_sec": delay})
        if delay and result.status == "queued":
            self.timer.schedule_in(delay)

    async def _settle_busy(self, conn: asyncpg.Connection, candidate: SkippedCandidate) -> None:
        """A candidate left queued because another session holds its lock_key. If a job of that key
        runs (or a claim of one was committing), its finish will wake us: nothing to do. If the
        key is free by now, claim again. If only a stray holds it (a fenced-off pipeline winding
        down), hold the job back DL_CLAIM_BACKOFF_SEC so it does not head every claim meanwhile."""
        queue_conn = QueueConnection(conn)
        running_holders, locked_now = await queue_conn.lock_holders(candidate.job_id, candidate.lock_key)
        if locked_now:
            await queue_conn.unlock(candidate.lock_key)
            self._hint_work()
            return
        if running_holders:
            metrics.CLAIM_SKIPPED.labels(self.queue, "lock_held_by_claim").inc()
            return
        delay = self.env.settings.claim_backoff_sec
        moved = await queue_conn.delay_lock_busy(candidate.job_id, delay)
        metrics.CLAIM_SKIPPED.labels(self.queue, "lock_held_by_stray").inc()
        log.info("lock_key held by a session with no running job; job held back", extra={
            "job_id": str(candidate.job_id), "lock_key": candidate.lock_key, "retry_in_sec": delay})
        if moved is not None:
            self.timer.schedule_in(delay)

    def _start(self, job: ClaimedJob) -> None:
        attempt = Attempt(job, self.env, self._submit_finish)
        self.running[job.job_id] = attempt
        metrics.RUNNING_JOBS.labels(self.queue).inc()
        if self._next_heartbeat is None:
            self._next_heartbeat = time.monotonic() + self._heartbeat_period()
        task = asyncio.create_task(self._run_attempt(attempt))
        self._tasks.add(task)

    async def _run_attempt(self, attempt: Attempt) -> None:
        try:
            await attempt.run()
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("attempt crashed", extra={"job_id": str(attempt.job.job_id), "queue": self.queue})
        finally:
            metrics.RUNNING_JOBS.labels(self.queue).dec()
            self.running.pop(attempt.job.job_id, None)
            self._tasks.discard(asyncio.current_task())  # type: ignore[arg-type]
            if not self.running:
                self._next_heartbeat = None
            self._wake.set()  # a slot is free

    # -- finish ------------------------------------------------------------------------------------

    async def _submit_finish(self, request: FinishRequest) -> FinishResult:
        future: asyncio.Future[FinishResult] = asyncio.get_running_loop().create_future()
        self._finishes.append((request, future))
        self._wake.set()
        return await future

    async def _flush_finishes(self, conn: asyncpg.Connection) -> None:
        batch = self._finishes[:MAX_BATCH * 4]
        requests = []
        for request, _ in batch:
            owns_lock = self._held.get(_lock_hash_of(request, self.running)) == request.job_id
            requests.append(_with_unlock(request, request.unlock and owns_lock))
        started = time.perf_counter()
        results = await QueueConnection(conn).finish(requests)
        metrics.FINISH_SECONDS.labels(self.queue).observe(time.perf_counter() - started)
        # The locks are released: a claim later in this step may take these keys again. (If the
        # step fails, the connection and all its locks are dropped anyway.)
        for request in requests:
            if request.unlock:
                self._held.pop(_lock_hash_of(request, self.running), None)
        self._flushed = (batch, requests, results)

    def _resolve_flushed(self) -> None:
        """After the step committed: the finishes are durable, tell their attempts."""
        if self._flushed is None:
            return
        batch, requests, results = self._flushed
        self._flushed = None
        del self._finishes[:len(batch)]
        for request, (_, future) in zip(requests, batch, strict=True):
            result = results[request.job_id]
            if result.status == "queued" and request.delay_sec > 0:
                self.timer.schedule_in(request.delay_sec)
            if not future.done():
                future.set_result(result)

    # -- heartbeat ---------------------------------------------------------------------------------

    def _heartbeat_period(self) -> float:
        shortest_lease = min((a.job.lease_ttl_sec for a in self.running.values()), default=3600)
        return min(self.env.settings.heartbeat_sec, shortest_lease / 3)

    def _until_heartbeat(self) -> float | None:
        if self._next_heartbeat is None:
            return None
        return max(0.0, self._next_heartbeat - time.monotonic())

    def _heartbeat_due(self) -> bool:
        return self._next_heartbeat is not None and time.monotonic() >= self._next_heartbeat

    async def _heartbeat(self, conn: asyncpg.Connection) -> None:
        attempts = [(a.job.job_id, a.job.attempt) for a in self.running.values()]
        started = time.perf_counter()
        alive = await QueueConnection(conn).heartbeat(attempts)
        metrics.HEARTBEAT_SECONDS.labels(self.queue).observe(time.perf_counter() - started)
        self._next_heartbeat = time.monotonic() + self._heartbeat_period()
        for job_id, _ in attempts:
            attempt = self.running.get(job_id)
            if attempt is None:
                continue
            if job_id not in alive:
                attempt.request_stop("lease_lost")
            elif alive[job_id]:
                attempt.request_stop("cancel")


def _lock_hash_of(request: FinishRequest, running: dict[uuid.UUID, Attempt]) -> int | None:
    attempt = running.get(request.job_id)
    return attempt.job.lock_hash if attempt is not None else None


def _with_unlock(request: FinishRequest, unlock: bool) -> FinishRequest:
    return request if request.unlock == unlock else replace(request, unlock=unlock)
