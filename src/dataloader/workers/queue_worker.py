"""The loop of one queue's worker: it decides, step by step, what the control connection does
(flush finishes, heartbeat, claim for free slots), starts the claimed attempts and sleeps when
there is nothing to do.

Each step flushes finished attempts (the completer), heartbeats if due, and claims if there may
be work; when more than one is due they share one transaction: one commit (one WAL flush) instead
of one each. The common busy step (plain successes to finish, the plain claim, nothing else) is
one autocommit statement (step_succeeded_claim.sql): one round trip instead of four. Idle, the
loop sends nothing: it sleeps until a NOTIFY for its queue, the due time of a delayed job, a
finished attempt, or the bounded fallback poll (the DueTimer). The connection and its lock ledger
live in `control.py`, the finish batches in `completer.py`.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Coroutine, Iterator
from typing import Any

from dataloader import metrics, tracing
from dataloader.maintenance.waiting import Backoff, wait_event
from dataloader.model.hold import HoldRule
from dataloader.storage.db import is_connection_error
from dataloader.storage.owned_connection import OwnedConnection
from dataloader.storage.queue_connection import (
    ClaimBatch,
    ClaimedJob,
    FinishRequest,
    FinishResult,
    QueueConnection,
    SkippedCandidate,
    can_finish_with_claim,
)
from dataloader.workers.attempt import Attempt
from dataloader.workers.claim_ahead import AheadJob, ClaimAhead
from dataloader.workers.completer import Completer
from dataloader.workers.control import ControlConnection
from dataloader.workers.env import EngineEnv
from dataloader.workers.heartbeat import HeartbeatSchedule, heartbeat_period
from dataloader.workers.lease_guard import LeaseGuard
from dataloader.workers.wakeup import DueTimer

log = logging.getLogger("dataloader.worker")

# Jobs claimed by one statement at most.
MAX_CLAIM_BATCH = 64

# The limits that hold back a whole queue (flow control, 0022), as dl_flow_gate names them; a
# partition key's limits hold back that key only.
QUEUE_LIMITS = frozenset({"concurrency", "rate"})
# The gate's verdicts of a task's own limits (0027), and their `limit` label. Like a partition
# key's, they hold back one task's jobs only: the next walk passes that task over.
TASK_LIMITS = {"task_concurrency": "concurrency", "task_rate": "rate"}


# Jobs parked per statement behind a key this worker holds (park_key_waiters.sql): one batch per
# loop turn, so the control connection's finishes and claims for the other slots wait ~10 ms at most.
PARK_BATCH = 2000

# Keys whose stray holders are remembered at most (then forgotten together: they only shorten a wait).
MAX_STRAY_KEYS_REMEMBERED = 10_000
FIRST_STRAY_HOLD_BACK_SEC = 0.2


def stray_hold_back(strikes: int, claim_backoff_sec: float) -> float:
    """How long to hold back a job whose lock_key a session with no running job holds, after
    `strikes` earlier sightings of such a holder for the key. The first look is often not a stray
    at all: a `ctx.transaction()` on another node committed the key's job a moment before its
    control connection released the lock. So start short and grow fourfold up to
    DL_CLAIM_BACKOFF_SEC: 0.2, 0.8, 3.2, 12.8 s, then the backoff."""
    return min(claim_backoff_sec, FIRST_STRAY_HOLD_BACK_SEC * 4 ** min(strikes, 16))


class QueueWorker:
    def __init__(self, queue: str, concurrency: int, env: EngineEnv) -> None:
        self.queue = queue
        self.concurrency = concurrency
        self.env = env
        self.clock = env.clock
        self.timer = DueTimer(env.settings.poll_fallback_sec, on_fire=self._timer_fired, clock=env.clock)
        self.running: dict[uuid.UUID, Attempt] = {}
        self.control = ControlConnection(queue, env.pool, env.quarantine, self.running)
        # Jobs claimed beyond the concurrency, not started yet (claim_ahead.py), in claim order.
        self._ahead: dict[uuid.UUID, AheadJob] = {}
        self.claim_ahead = ClaimAhead(env.settings.claim_ahead)
        self._in_step = False
        # Finishes of jobs claimed ahead and given back unstarted, not yet written (they have no slot).
        self._returns_pending = 0
        self._giving_back = False  # a give-back's own submit frees no slot: it starts nothing
        self._relocks_seen = 0
        self.completer = Completer(queue, self.running, on_submit=self._submitted, on_requeued=self.timer.schedule_in,
                                   hold=HoldRule.for_queue(env.settings, queue))
        self.heartbeats = HeartbeatSchedule(env.settings.heartbeat_sec, env.clock)
        self.lease_guard = LeaseGuard(queue, self.running, env.clock)
        # this queue's series, looked up once (labels() per job was a tenth of a drain's CPU)
        self._running_jobs = metrics.RUNNING_JOBS.labels(queue)
        self._claimed_ahead = metrics.CLAIMED_AHEAD.labels(queue)
        self._claim_seconds = metrics.CLAIM_SECONDS.labels(queue)
        self._finish_seconds = metrics.FINISH_SECONDS.labels(queue)
        # When the current step began (monotonic): the leases it writes start after that.
        self._step_started = 0.0
        self._tasks: set[asyncio.Task[None]] = set()
        self._wake = asyncio.Event()
        self._claiming = True
        # The queue has limits (0022): claim with claim_limited_jobs.sql (the flow gate). Learned
        # from next_due_in.sql after an empty claim, and from the limited claim's own answer.
        self._limited = False
        # The queue is fair (0024): claim with claim_jobs_fair.sql (round-robin across partition
        # keys, with the flow gate when it has limits too). Learned from next_due_in.sql likewise.
        self._fair = False
        # running attempts claimed while their queue had a global concurrency limit
        self._limit_slots_held = 0
        self._work_generation = 1  # bumped by every hint of new work
        self._settled_generation = 0  # the hints a claim already answered (it came back short)
        self._busy: list[SkippedCandidate] = []
        self._reentrant: list[ClaimedJob] = []
        self._claimed: list[ClaimedJob] = []
        # attempts whose lease this step's heartbeat renewed (the guard learns it once committed)
        self._renewed: list[Attempt] = []
        # lock_key -> how many times in a row a stray was seen holding it (see stray_hold_back)
        self._stray_strikes: dict[str, int] = {}
        # running attempts whose lock_key has a backlog still to park (0017)
        self._to_park: dict[uuid.UUID, ClaimedJob] = {}
        # running attempts with jobs of their lock_key parked behind them: their finish unparks the
        # next one, which the same step then claims (no NOTIFY round trip in a hot key's handoff)
        self._holds_parked: set[uuid.UUID] = set()

    @property
    def held_locks(self) -> dict[int, uuid.UUID]:
        """lock hash -> job, for every advisory lock the control connection holds (for diagnostics)."""
        return self.control.ledger.snapshot()

    # -- signals from outside ----------------------------------------------------------------------

    async def notify(self, source: str = "notify") -> None:
        self.hint(source)

    def hint(self, source: str = "notify") -> None:
        """New work may be waiting (a NOTIFY, a reconnect of the node's listener): claim soon."""
        metrics.WAKEUPS.labels(self.queue, source).inc()
        self._hint_work()

    def _timer_fired(self, source: str) -> None:
        metrics.WAKEUPS.labels(self.queue, source).inc()
        self._hint_work()

    def _hint_work(self) -> None:
        self._work_generation += 1
        self._wake.set()

    def _wake_up(self) -> None:
        self._wake.set()

    def _submitted(self) -> None:
        """An attempt's finish was submitted: its slot is free. While a step is in flight, a job
        claimed ahead takes it at once (it runs while the database works); otherwise the loop's
        next step starts it, after sending its statement."""
        self._wake.set()
        if self._in_step and self._ahead and not self._giving_back:
            self._start_ahead()

    def cancel(self, job_id: uuid.UUID) -> None:
        """A cancel was asked for (its NOTIFY): stop the attempt, or give the job back if it was
        claimed ahead and has not started (the release ends it `canceled`: finish_jobs.sql)."""
        attempt = self.running.get(job_id)
        if attempt is not None:
            attempt.request_stop("cancel")
        elif (ahead := self._ahead.get(job_id)) is not None:
            self._give_back(ahead, "cancel")

    async def stop_claiming(self) -> None:
        self._claiming = False
        for ahead in list(self._ahead.values()):
            self._give_back(ahead, "shutdown")
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
        backoff = Backoff(clock=self.clock)
        try:
            while self._claiming or self.running or self.completer:
                if not self._has_work_now():
                    await wait_event(self._wake, self.heartbeats.until_due(), clock=self.clock)
                self._wake.clear()
                try:
                    conn = await self.control.get()
                    if self._ahead and self.control.relocks != self._relocks_seen:
                        self._relocks_seen = self.control.relocks
                        self._give_back_unlocked()
                    await self._step(conn)
                except Exception as exc:
                    self.control.drop()
                    if not is_connection_error(exc):
                        log.exception("queue worker step failed", extra={"queue": self.queue})
                    elif not backoff.failing:
                        log.warning("database unreachable, retrying", extra={"queue": self.queue,
                                                                             "error": str(exc)})
                    await backoff.pause(self._wake)
                    continue
                if backoff.succeeded():
                    metrics.DB_RECONNECTS.labels("worker").inc()
                    log.info("database reachable again", extra={"queue": self.queue})
        finally:
            timer.cancel()
            self.lease_guard.close()
            for task in list(self._tasks):
                task.cancel()
            await asyncio.gather(timer, *self._tasks, return_exceptions=True)
            await self.control.release()

    async def _step(self, conn: OwnedConnection) -> None:
        """Flush finished attempts, heartbeat if due, claim if there may be work. When more than one
        is due they share one transaction: one commit (one WAL flush) instead of one each. A failed
        step drops the connection (and with it every lock it held), so no partial effect of a
        rolled-back step survives: session locks ignore rollbacks, terminated sessions do not.
        Claimed jobs whose lock_key turned out busy are settled after the commit, in statements of
        their own, so the step's row locks are never held while waiting on another worker."""
        self._step_started = self.clock.monotonic()
        # Jobs claimed ahead take the free slots first: their pipelines run while this step's
        # statement is in flight (they are tasks, run once the step awaits the database).
        if self._ahead:
            self._start_ahead()
        self._in_step = True
        try:
            await self._step_in_flight(conn)
        finally:
            self._in_step = False

    async def _step_in_flight(self, conn: OwnedConnection) -> None:
        self.completer.begin_step()
        self._busy = []
        self._reentrant = []
        self._claimed = []
        self._renewed = []
        flush, beat = bool(self.completer), self.heartbeats.due()
        hands_over = flush and self._hands_over_a_parked_key()
        claim = self._want_claim() or hands_over
        frees_slots = flush and self._finishes_free_global_slots()
        one_statement = flush and claim and not (beat or hands_over or frees_slots) and self._one_statement_batch()
        if one_statement:
            await self._finish_and_claim(conn, *one_statement)
        elif flush + beat + claim > 1:
            async with conn.transaction():
                await self._step_parts(conn, flush, beat, claim)
        else:
            await self._step_parts(conn, flush, beat, claim)
        self.completer.resolve()
        if frees_slots:
            # Workers on other nodes that found the queue at its global limit sleep until a hint.
            await QueueConnection(conn).wake_queue(self.queue)
        if self._renewed:
            renewed, self._renewed = self._renewed, []
            self.lease_guard.renewed(renewed, self._step_started)
        claimed, self._claimed = self._claimed, []
        if claimed and self._claiming and self.claim_ahead.is_open:
            # started by the next step, once its statement is sent, or as slots free meanwhile
            for job in claimed:
                self._ahead[job.job_id] = AheadJob(job, self._step_started, self._step_started)
            self._claimed_ahead.set(len(self._ahead))
        else:
            for job in claimed:
                self._start(job, self._step_started)
        reentrant, self._reentrant = self._reentrant, []
        for job in reentrant:
            await self._settle_reentrant(conn, job)
        busy, self._busy = self._busy, []
        for candidate in busy:
            await self._settle_busy(conn, candidate)
        if self._to_park:
            await self._park_one_batch(conn)

    async def _step_parts(self, conn: OwnedConnection, flush: bool, beat: bool, claim: bool) -> None:
        if flush:
            await self.completer.flush(conn, self.control.ledger)
        if beat:
            await self._heartbeat(conn)
        if claim:
            await self._claim(conn)

    def _one_statement_batch(self) -> tuple[list[Any], list[FinishRequest]] | None:
        """The finish batch, if this step's finish and claim can be one statement
        (step_succeeded_claim.sql): the plain claim (no limit, not fair), every finish a plain
        success, and no job of ours held back behind a key the finishes release (the ledger wakes
        those in the step). None: the two-statement step."""
        if self._limited or self._fair or self.control.ledger.has_parked():
            return None
        batch, requests = self.completer.next_batch(self.control.ledger)
        return (batch, requests) if can_finish_with_claim(requests) else None

    async def _finish_and_claim(self, conn: OwnedConnection, batch: list[Any], requests: list[FinishRequest]
                                ) -> None:
        """The step's finish and claim in one autocommit statement. The ledger forgets the locks the
        finishes released before it takes the claimed ones: the claim may hand a freed key to the
        next job of that key (the statement leaves this session holding it once)."""
        ledger = self.control.ledger
        generation = self._work_generation
        want = self._claim_size()
        queue_conn = QueueConnection(conn)
        started = time.perf_counter()
        results, claimed = await queue_conn.finish_succeeded_and_claim(requests, self.queue, self.env.worker_name, want)
        # one statement did both: it is observed as a claim and as a finish
        elapsed = time.perf_counter() - started
        self._finish_seconds.observe(elapsed)
        self._claim_seconds.observe(elapsed)
        self.claim_ahead.claimed(elapsed)
        await self.completer.written(conn, ledger, batch, requests, results)
        await self._take_claimed(queue_conn, claimed, generation, want)

    def _has_work_now(self) -> bool:
        return (bool(self.completer) or self._want_claim() or self.heartbeats.due() or bool(self._to_park)
                or (bool(self._ahead) and self._busy_slots() < self.concurrency))

    def _busy_slots(self) -> int:
        """Attempts still executing. One whose finish is waiting to be written has stopped
        executing: its slot is free, so the step that writes its finish can claim its successor
        (one commit for both). (A job given back unstarted never had a slot.)"""
        return len(self.running) - (len(self.completer) - self._returns_pending)

    def _ahead_allowance(self) -> int:
        """Jobs that may wait claimed beyond the concurrency: none for a limited or fair queue (a
        job waiting here would hold a slot of the queue's limit, or a tenant's turn, unused)."""
        return 0 if self._limited or self._fair else self.claim_ahead.allowance()

    def _start_ahead(self) -> None:
        while self._ahead and self._busy_slots() < self.concurrency:
            ahead = self._ahead.pop(next(iter(self._ahead)))
            self._start(ahead.job, ahead.lease_from)
        self._claimed_ahead.set(len(self._ahead))

    def _give_back_unlocked(self) -> None:
        """The control connection was replaced: its session held the lock_keys of the jobs claimed
        ahead too, and only running attempts' are retaken (control.py `_relock`). Put those jobs
        back rather than start them without their lock."""
        ledger = self.control.ledger
        for ahead in list(self._ahead.values()):
            if ledger.holder(ahead.job.lock_hash) != ahead.job.job_id:
                self._give_back(ahead, "reconnect")

    def _give_back(self, ahead: AheadJob, why: str) -> None:
        """Put a job claimed ahead back unstarted: back to `queued` in its place in line, its attempt
        not counted and its lock_key released (finish_jobs.sql's release, reason 'claimed_ahead'; a
        cancel asked for meanwhile ends it `canceled`; a lease already lost only unlocks)."""
        job = ahead.job
        if self._ahead.pop(job.job_id, None) is None:
            return  # started or given back meanwhile
        self._claimed_ahead.set(len(self._ahead))
        self._returns_pending += 1
        metrics.CLAIM_AHEAD_RETURNED.labels(self.queue, why).inc()

        def written(_: FinishResult) -> None:
            self._returns_pending -= 1
            self._holds_parked.discard(job.job_id)
            self._to_park.pop(job.job_id, None)

        self._giving_back = True
        try:
            self.completer.submit_later(FinishRequest(
                job_id=job.job_id, attempt=job.attempt, outcome="release", lock_key=job.lock_key, unlock=True,
                reason="claimed_ahead", lock_hash=job.lock_hash), written)
        finally:
            self._giving_back = False

    def _hands_over_a_parked_key(self) -> bool:
        """A finish about to be written frees a key with parked jobs behind it: its statement
        unparks the next one, so claim in the same step even if the last claim came back short."""
        return (self._claiming and self._busy_slots() < self.concurrency
                and not self._holds_parked.isdisjoint(self.completer.pending_job_ids()))

    def _finishes_free_global_slots(self) -> bool:
        """A finish about to be written ends a job of a queue with a global concurrency limit (as
        its claim saw the queue): it frees a slot another node's worker may be waiting for. Only
        looked at while such a job runs here (never for a queue that had no limit)."""
        if not self._limit_slots_held:
            return False
        return any(attempt.job.frees_on_finish for job_id in self.completer.pending_job_ids()
                   if (attempt := self.running.get(job_id)) is not None)

    def _want_claim(self) -> bool:
        return (self._claiming and self._busy_slots() + len(self._ahead) < self.concurrency + self._ahead_allowance()
                and self._work_generation != self._settled_generation)

    # -- claim -------------------------------------------------------------------------------------

    async def _claim(self, conn: OwnedConnection) -> None:
        generation = self._work_generation
        want = self._claim_size()
        queue_conn = QueueConnection(conn)
        started = time.perf_counter()
        batch = await queue_conn.claim(self.queue, self.env.worker_name, want, limited=self._limited, fair=self._fair)
        elapsed = time.perf_counter() - started
        self._claim_seconds.observe(elapsed)
        self.claim_ahead.claimed(elapsed)
        await self._take_claimed(queue_conn, batch, generation, want)

    def _claim_size(self) -> int:
        free = self.concurrency + self._ahead_allowance() - self._busy_slots() - len(self._ahead)
        return min(free, MAX_CLAIM_BATCH)

    async def _take_claimed(self, queue_conn: QueueConnection, batch: ClaimBatch, generation: int, want: int) -> None:
        """What a claim statement answered: the claimed jobs (started once the step committed), the
        skipped ones to settle, and whether the queue is settled until the next hint."""
        if batch.limited is False:
            self._limited = False  # the limits were cleared: back to the plain claim
        held = batch.held
        for candidate in held:
            if candidate.held in TASK_LIMITS:  # a task's own limit (0027): labelled with the task
                metrics.TASK_HELD_BACK.labels(self.queue, candidate.task, TASK_LIMITS[candidate.held]).inc()
            else:
                metrics.FLOW_HELD_BACK.labels(self.queue, candidate.held).inc()
        # (The fair claim reads a bounded number of each tenant's jobs, so a short batch of it does
        # not mean the queue has no more: only an empty one settles it.)
        if (batch.candidates < want and not (self._fair and batch.candidates)) \
                or any(c.held in QUEUE_LIMITS for c in held):
            # The queue had no more runnable jobs than these, or a queue-wide limit holds the rest
            # back: sleep until a new hint (an enqueue, a finish that frees a global slot, a limit
            # changed) or until a delayed job is due or a rate window opens. (Skipped candidates do
            # not count as settled work otherwise: a full batch with skips claims again. So does a
            # full batch that a partition key's limit cut short: the next walk skips that key,
            # now at its limit, and reaches the other keys' jobs.)
            self._settled_generation = generation
            if not batch.candidates or held:
                due = await queue_conn.next_due(self.queue)
                if (due.limited, due.fair) != (self._limited, self._fair):
                    # The queue's limits or fair share were set (the claim used left it out) or
                    # cleared: claim again at once with the statement that fits.
                    self._limited, self._fair = due.limited, due.fair
                    if self._limited or self._fair:
                        # claimed by the plain claim's order and outside the limits: they go back,
                        # for the gate or the tenants' turns to decide
                        for ahead in list(self._ahead.values()):
                            self._give_back(ahead, "queue_changed")
                    self._hint_work()
                if due.due_in is not None:
                    self.timer.schedule_in(due.due_in)
        ledger = self.control.ledger
        for job in batch.claimed:
            if self._stray_strikes:
                self._stray_strikes.pop(job.lock_key, None)
            if job.lock_hash not in ledger:
                ledger.take(job.lock_hash, job.job_id)
                self._claimed.append(job)  # started once the step has committed
                if job.key_backlog:
                    self._to_park[job.job_id] = job
                if job.key_parked_behind:
                    self._holds_parked.add(job.job_id)
            else:
                self._reentrant.append(job)
        for candidate in batch.skipped:
            if candidate.held is not None:
                continue  # left queued and untouched; counted above
            if candidate.lock_busy:
                self._busy.append(candidate)
            else:
                metrics.CLAIM_SKIPPED.labels(self.queue, "same_key_in_batch").inc()

    async def _park_one_batch(self, conn: OwnedConnection) -> None:
        """Park one batch of the jobs waiting behind a key one of our attempts holds, in its own
        statement after the step's commit. Only the holder parks (see park_key_waiters.sql), and
        only while the attempt runs: its finish, on this same connection, unparks the key's head."""
        job_id, job = next(iter(self._to_park.items()))
        attempt = self.running.get(job_id)
        if (attempt is None or attempt.job is not job) and job_id not in self._ahead:
            del self._to_park[job_id]
            return
        parked = await QueueConnection(conn).park_key_waiters(job.job_id, job.attempt, PARK_BATCH)
        metrics.JOBS_PARKED.labels(self.queue).inc(parked)
        if parked:
            self._holds_parked.add(job_id)
        if parked < PARK_BATCH:
            del self._to_park[job_id]

    async def _settle_reentrant(self, conn: OwnedConnection, job: ClaimedJob) -> None:
        """A claimed job whose lock this session already held: the re-entrant grant gave the key to
        a second job (an attempt of ours still stopping after it was fenced off, or two keys with
        one hashtext). Undo the extra lock count and put the job back without using an attempt."""
        holder = self.running.get(self.control.ledger.holder(job.lock_hash))  # type: ignore[arg-type]
        live_holder = holder is not None and holder.stop_reason != "lease_lost"
        delay = 0.0 if live_holder else self.env.settings.claim_backoff_sec
        result = await QueueConnection(conn).finish_one(FinishRequest(
            job_id=job.job_id, attempt=job.attempt, outcome="release", lock_key=job.lock_key, unlock=True,
            reason="lock_busy", delay_sec=delay))
        metrics.CLAIM_SKIPPED.labels(self.queue, "lock_held_by_us").inc()
        log.info("lock_key held by this worker, job put back", extra={
            "job_id": str(job.job_id), "lock_key": job.lock_key, "live_holder": live_holder, "retry_in_sec": delay,
            **tracing.job_trace_ids(job.traceparent)})
        if delay and result.status == "queued":
            self.timer.schedule_in(delay)
            if holder is None and result.available_at is not None:
                # The key's holder is an attempt of ours that ended while its thread runs on: the
                # release of that key (when the thread ends) wakes this job at once.
                self.control.ledger.park(job.lock_hash, job.job_id, result.available_at)

    async def _settle_busy(self, conn: OwnedConnection, candidate: SkippedCandidate) -> None:
        """A candidate left queued because another session holds its lock_key. If a job of that key
        runs (or a claim of one was committing), its finish will wake us: nothing to do. If the
        key is free by now, claim again. If only a stray holds it (a fenced-off pipeline winding
        down, or a lock a moment from its release), hold the job back, briefly at first and then
        up to DL_CLAIM_BACKOFF_SEC (`stray_hold_back`), so it does not head every claim meanwhile."""
        queue_conn = QueueConnection(conn)
        running_holders, locked_now = await queue_conn.lock_holders(candidate.job_id, candidate.lock_key)
        if locked_now:
            await queue_conn.unlock(candidate.lock_key)
            self._hint_work()
            return
        if running_holders:
            metrics.CLAIM_SKIPPED.labels(self.queue, "lock_held_by_claim").inc()
            return
        strikes = self._stray_strikes.get(candidate.lock_key, 0)
        if len(self._stray_strikes) >= MAX_STRAY_KEYS_REMEMBERED:
            self._stray_strikes.clear()
        self._stray_strikes[candidate.lock_key] = strikes + 1
        delay = stray_hold_back(strikes, self.env.settings.claim_backoff_sec)
        moved = await queue_conn.delay_lock_busy(candidate.job_id, delay)
        metrics.CLAIM_SKIPPED.labels(self.queue, "lock_held_by_stray").inc()
        log.info("lock_key held by a session with no running job; job held back", extra={
            "job_id": str(candidate.job_id), "lock_key": candidate.lock_key, "retry_in_sec": delay})
        if moved is not None:
            self.timer.schedule_in(delay)

    # -- attempts ----------------------------------------------------------------------------------

    def _start(self, job: ClaimedJob, lease_from: float) -> None:
        """`lease_from`: when (monotonic) the step that claimed the job, or last renewed its lease, began."""
        attempt = Attempt(job, self.env, self.completer.submit)
        self.running[job.job_id] = attempt
        self._limit_slots_held += job.frees_on_finish
        self._running_jobs.inc()
        self.heartbeats.started(self._lease_ttls())
        self.lease_guard.claimed(attempt, lease_from)
        try:
            # No attempt task per job (Attempt.start): its pipeline task and callbacks.
            rest = attempt.start(self.completer.submit_later, self._attempt_ended)
        except Exception:
            log.exception("attempt crashed", extra=attempt.log_extra())
            self._attempt_ended(attempt)
            return
        if rest is not None:
            task = asyncio.create_task(self._run_attempt(attempt, rest))
            self._tasks.add(task)

    async def _run_attempt(self, attempt: Attempt, rest: Coroutine[Any, Any, None]) -> None:
        try:
            await rest
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("attempt crashed", extra=attempt.log_extra())
        finally:
            self._tasks.discard(asyncio.current_task())  # type: ignore[arg-type]
            self._attempt_ended(attempt)

    def _attempt_ended(self, attempt: Attempt) -> None:
        self._running_jobs.dec()
        if attempt.ran_sec is not None:
            self.claim_ahead.ran(attempt.ran_sec)
        self._limit_slots_held -= attempt.job.frees_on_finish
        # Only if it is still this attempt: when a fenced-off attempt's refused finish was
        # written in the step that claimed the job again, the next attempt of the same job is
        # registered under the same id while this one winds down. Popping it would leave the
        # new attempt without heartbeats and its lock_key locked forever.
        if self.running.get(attempt.job.job_id) is attempt:
            del self.running[attempt.job.job_id]
            self._holds_parked.discard(attempt.job.job_id)
        if not self.running:
            self.heartbeats.idle()
        self._wake.set()  # a slot is free

    # -- heartbeat ---------------------------------------------------------------------------------

    def _lease_ttls(self) -> Iterator[int]:
        yield from (a.job.lease_ttl_sec for a in self.running.values())
        yield from (a.job.lease_ttl_sec for a in self._ahead.values())

    async def _heartbeat(self, conn: OwnedConnection) -> None:
        attempts = [(a.job.job_id, a.job.attempt) for a in self.running.values()]
        attempts += [(a.job.job_id, a.job.attempt) for a in self._ahead.values()]
        started = time.perf_counter()
        alive = await QueueConnection(conn).heartbeat_and_backlog(attempts)
        metrics.HEARTBEAT_SECONDS.labels(self.queue).observe(time.perf_counter() - started)
        self.heartbeats.beaten(self._lease_ttls())
        renewed = self._renewed
        # An attempt whose finish is pending has ended: nothing of it is left to stop, and its
        # finish (fenced, written first when this step wrote it) has the last word. When this step
        # wrote it, the job is no longer running and the heartbeat does not find it: that is no
        # lost lease (a stop request then logged "lease_lost" outside the job's trace).
        finishing = self.completer.pending_job_ids() if self.completer else frozenset()
        for job_id, _ in attempts:
            attempt = self.running.get(job_id)
            if attempt is None:
                if (ahead := self._ahead.get(job_id)) is not None:
                    self._renew_ahead(ahead, alive.get(job_id))
                continue
            if job_id not in alive:
                if job_id not in finishing:
                    attempt.request_stop("lease_lost")
                continue
            renewed.append(attempt)
            cancel_requested, key_backlog = alive[job_id]
            if cancel_requested and job_id not in finishing:
                attempt.request_stop("cancel")
            elif key_backlog:
                self._to_park[job_id] = attempt.job

    def _renew_ahead(self, ahead: AheadJob, state: tuple[bool, bool] | None) -> None:
        """The heartbeat's answer for a job claimed ahead: renewed, or given back if its lease was
        lost, a cancel was asked for, or it has waited a heartbeat period for a slot already (the
        jobs ahead of it turned out long: another node may run it sooner)."""
        if state is None:
            self._give_back(ahead, "lease_lost")
            return
        cancel_requested, key_backlog = state
        if cancel_requested:
            self._give_back(ahead, "cancel")
        elif (waited := self._step_started - ahead.claimed_at) >= heartbeat_period(
                self.env.settings.heartbeat_sec, (ahead.job.lease_ttl_sec,)):
            # the attempts in the slots have run at least this long: claim for free slots only
            # until short runs reopen it (else the next claim would take the job back at once)
            self.claim_ahead.ran(waited)
            self._give_back(ahead, "waited")
        else:
            ahead.lease_from = self._step_started
            if key_backlog:
                self._to_park[ahead.job.job_id] = ahead.job
