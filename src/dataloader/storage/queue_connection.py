"""The statements of a queue worker, on its control connection.

The advisory lock of a job's lock_key is a session lock, so the claim that takes it, the
heartbeats and the finish that releases it all go through that same connection, in batches.
All statements come from `queries/`.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime
from functools import cache
from typing import Any, Literal

import asyncpg

from dataloader.model import payload_crypto
from dataloader.model.hold import HoldRule
from dataloader.storage.owned_connection import OwnedConnection
from dataloader.storage.plan_epoch import in_epoch, observe_table_pages
from dataloader.storage.queries import sql

# "committed": the pipeline's ctx.transaction() already finished the job (finish_in_transaction.sql);
# the statement only releases its lock_key and wakes the key's waiters.
FinishOutcome = Literal["succeeded", "canceled", "error", "release", "committed"]


@dataclass(frozen=True, slots=True)
class ClaimedJob:
    job_id: uuid.UUID
    queue: str
    task: str
    args: dict[str, Any]
    lock_key: str
    partition_key: str
    lease_ttl_sec: int
    attempt: int
    max_attempts: int
    wait_sec: float
    lock_hash: int
    request_id: str | None = None
    attempts_before_retry: int = 0
    timeout_sec: int | None = None  # the job's own run-time limit (0010)
    chain_next: Any = None  # stages planned to run after it succeeds (0011; None: none)
    # 16 or more jobs of its lock_key wait unparked: park them while it runs (0017)
    key_backlog: bool = False
    # jobs of its lock_key are parked behind it (0017), or a backlog is (about to be parked): its
    # finish hands the key over (unparks the next one), so the worker claims in that finish's step
    key_parked_behind: bool = False
    traceparent: str | None = None  # the enqueuing caller's span, W3C (0020; None: not traced)
    previous_span: str | None = None  # the span of its last traced attempt (0021; None: none)
    # its queue has a global concurrency limit (0022): its finish frees a slot another node may be
    # waiting for, so the worker wakes the queue's workers after writing it
    frees_on_finish: bool = False

    @property
    def attempts_left(self) -> int:
        """Attempts the job's own budget allows after this one (a pipeline may override it)."""
        return self.max_attempts - (self.attempt - self.attempts_before_retry)

    @property
    def locked(self) -> bool:
        """Always true: the claim only marks a job running once its lock_key's lock is granted."""
        return True


@dataclass(frozen=True, slots=True)
class SkippedCandidate:
    """A runnable job the claim looked at but left queued and untouched. `lock_busy`: its
    lock_key's advisory lock is held by another session (a claim racing ours, or a stray holder);
    otherwise an earlier job of the same key in the batch asked for the lock instead."""

    job_id: uuid.UUID
    queue: str
    task: str
    lock_key: str
    lock_hash: int
    lock_busy: bool
    # the queue limit that held it back (dl_flow_gate, 0023: 'concurrency', 'rate',
    # 'partition_concurrency', 'partition_rate'); None: it was not held back by a limit
    held: str | None = None


@dataclass(frozen=True, slots=True)
class ClaimBatch:
    """What one claim statement did. `candidates` counts every runnable job it looked at: fewer
    than asked for means the queue had no more runnable jobs at that moment."""

    claimed: list[ClaimedJob]
    skipped: list[SkippedCandidate]
    # the queue had a limit as this claim read it (claim_limited_jobs.sql only; None: not said)
    limited: bool | None = None

    @property
    def candidates(self) -> int:
        return len(self.claimed) + len(self.skipped)

    @property
    def held(self) -> list[SkippedCandidate]:
        """Candidates a queue limit held back (they may start once a slot frees or a window opens)."""
        return [s for s in self.skipped if s.held is not None]


@dataclass(frozen=True, slots=True)
class NextDue:
    """When an idle worker should look again (seconds; None: nothing is due), and whether its queue
    has limits (the claim statement it must use)."""

    due_in: float | None
    limited: bool
    fair: bool = False  # the queue is fair (0024): claim_jobs_fair.sql, whatever `limited` says


@dataclass(frozen=True, slots=True)
class FinishRequest:
    """How one attempt ends. `unlock`: release its lock_key's advisory lock in the same statement."""

    job_id: uuid.UUID
    attempt: int
    outcome: FinishOutcome
    lock_key: str
    unlock: bool
    error: str | None = None
    fatal: bool = False
    max_attempts: int | None = None
    delay_sec: float = 0.0
    reason: str | None = None
    result_json: str | None = None  # the job's result as JSON text (checked storable); None: NULL
    # The lock hash, for a request whose attempt is no longer running (a timed-out sync pipeline's
    # thread ended: only its lock is released); None: the running attempt's.
    lock_hash: int | None = None
    # The jobs a success enqueues (workers/chaining.py's JSON array); None: none.
    next_json: str | None = None
    # The attempt's span, W3C (0021; None: not traced): the next attempt's span links to it.
    span: str | None = None


@dataclass(frozen=True, slots=True)
class FinishResult:
    """status is None when the write was refused: the attempt had been fenced off."""

    status: str | None
    available_at: datetime | None
    woken_queues: int


def _finish_results(rows: list[asyncpg.Record]) -> dict[uuid.UUID, FinishResult]:
    return {r["job_id"]: FinishResult(status=r["status"], available_at=r["available_at"], woken_queues=r["woken"])
            for r in rows}


@cache
def claim_sql(limit: int) -> str:
    """claim_jobs.sql with a constant LIMIT (see the note in the file)."""
    return sql("claim_jobs").replace("{limit}", _limit_text(limit))


@cache
def fair_claim_sql(limit: int) -> str:
    """claim_jobs_fair.sql (a fair queue, 0024: round-robin across partition keys) with a constant LIMIT."""
    return sql("claim_jobs_fair").replace("{limit}", _limit_text(limit))


@cache
def claim_limited_sql(limit: int) -> str:
    """claim_limited_jobs.sql (a queue with limits: the flow gate) with a constant LIMIT."""
    return sql("claim_limited_jobs").replace("{limit}", _limit_text(limit))


@cache
def step_claim_sql(limit: int) -> str:
    """step_succeeded_claim.sql (a step's finish of plain successes and its plain claim) with a constant LIMIT."""
    return sql("step_succeeded_claim").replace("{limit}", _limit_text(limit))


def _limit_text(limit: int) -> str:
    if not isinstance(limit, int) or limit < 1:
        raise ValueError(f"claim limit must be a positive int, got {limit!r}")
    return str(limit)


def _claim_batch(rows: list[asyncpg.Record], limited: bool) -> ClaimBatch:
    """A claim statement's rows (claim_answer.sql's columns) as a ClaimBatch. `limited`: the rows are
    claim_limited_jobs.sql's, which say whether the queue was still limited."""
    claimed: list[ClaimedJob] = []
    skipped: list[SkippedCandidate] = []
    if rows:
        observe_table_pages(rows[0]["table_pages"])
    for r in rows:
        if r["claimed"]:
            claimed.append(ClaimedJob(
                job_id=r["job_id"], queue=r["queue"], task=r["task"], args=r["args"], lock_key=r["lock_key"],
                partition_key=r["partition_key"], lease_ttl_sec=r["lease_ttl_sec"], attempt=r["attempt"],
                max_attempts=r["max_attempts"], wait_sec=r["wait_sec"], lock_hash=r["lock_hash"],
                request_id=r["request_id"], attempts_before_retry=r["attempts_before_retry"],
                timeout_sec=r["timeout_sec"], chain_next=r["chain_next"], key_backlog=r["key_backlog"],
                key_parked_behind=r["key_parked_behind"], traceparent=r["traceparent"],
                previous_span=r["attempt_span"], frees_on_finish=r.get("frees_on_finish", False),
            ))
        else:
            skipped.append(SkippedCandidate(
                job_id=r["job_id"], queue=r["queue"], task=r["task"], lock_key=r["lock_key"],
                lock_hash=r["lock_hash"], lock_busy=r["asked_lock"], held=r.get("held"),
            ))
    return ClaimBatch(claimed, skipped, limited=rows[0]["limited"] if limited and rows else None)


def can_finish_with_claim(requests: list[FinishRequest]) -> bool:
    """Whether step_succeeded_claim.sql can write these finishes: every one a success that
    enqueues no chain stage (finish_succeeded.sql's batch)."""
    return all(r.outcome == "succeeded" and r.next_json is None for r in requests)


class QueueConnection:
    """The statements of a queue worker, on its control connection. Advisory locks are session
    locks: the connection that claims a job holds its lock_key until the finish unlocks it there."""

    def __init__(self, conn: asyncpg.Connection | OwnedConnection) -> None:
        """`conn`: the worker's OwnedConnection (one owner, one statement at a time), or a plain
        connection (tests, tools)."""
        self.conn = conn

    async def claim(self, queue: str, worker: str, limit: int = 1, limited: bool = False,
                    fair: bool = False) -> ClaimBatch:
        """Claim up to `limit` jobs; each claimed job's lock_key is locked on this connection.
        `limited`: the queue has limits (0022), so claim through the flow gate; the plain claim
        starts nothing of a limited queue (the batch comes back empty, and next_due_in says why).
        `fair`: the queue is fair (0024): claim round-robin across its partition keys (with the
        flow gate when it also has limits); the other two claim nothing of a fair queue."""
        if fair:
            rows = await self.conn.fetch(in_epoch(fair_claim_sql(limit)), queue, worker)
        elif limited:
            rows = await self.conn.fetch(in_epoch(claim_limited_sql(limit)), queue, worker)
        else:
            rows = await self.conn.fetch(in_epoch(claim_sql(limit)), queue, worker)
        return _claim_batch(rows, limited=limited and not fair)

    async def finish_succeeded_and_claim(self, requests: list[FinishRequest], queue: str, worker: str, limit: int
                                         ) -> tuple[dict[uuid.UUID, FinishResult], ClaimBatch]:
        """A step in one statement (step_succeeded_claim.sql, autocommit): finish these attempts,
        every one a success that enqueues no chain stage (`can_finish_with_claim`), and claim up
        to `limit` jobs of `queue` as `claim` does with the plain claim. Each finish releases its
        lock first in the caller's bookkeeping: the claim may take a freed key again."""
        if not can_finish_with_claim(requests):
            raise ValueError("step_succeeded_claim.sql finishes plain successes only")
        rows = await self.conn.fetch(
            in_epoch(step_claim_sql(limit)), queue, worker,
            [r.job_id for r in requests], [r.attempt for r in requests], [r.max_attempts for r in requests],
            [r.lock_key for r in requests], [r.unlock for r in requests], _results(requests))
        split = next((n for n, r in enumerate(rows) if not r["finished"]), len(rows))
        finished = {r["job_id"]: FinishResult(status=r["status"], available_at=r["finish_available_at"],
                                              woken_queues=r["woken"]) for r in rows[:split]}
        return finished, _claim_batch(rows[split:], limited=False)

    async def claim_one(self, queue: str, worker: str) -> ClaimedJob | None:
        batch = await self.claim(queue, worker, 1)
        return batch.claimed[0] if batch.claimed else None

    async def delay_lock_busy(self, job_id: uuid.UUID, delay_sec: float) -> datetime | None:
        """Hold back a queued job whose lock_key a stray session holds; None if it is no longer queued."""
        return await self.conn.fetchval(in_epoch(sql("delay_lock_busy")), job_id, delay_sec)

    async def wake_parked(self, parked: list[tuple[uuid.UUID, datetime]]) -> None:
        """Jobs held back behind a key this connection just released may run now."""
        await self.conn.execute(in_epoch(sql("wake_parked_jobs")), [p[0] for p in parked], [p[1] for p in parked])

    async def park_key_waiters(self, job_id: uuid.UUID, attempt: int, batch: int) -> int:
        """Park up to `batch` jobs waiting behind the lock_key this running attempt holds (0017);
        returns how many (fewer than `batch`: none left, or the attempt no longer holds the key)."""
        return await self.conn.fetchval(in_epoch(sql("park_key_waiters")), job_id, attempt, batch)

    async def unlock(self, lock_key: str) -> bool:
        return await self.conn.fetchval(in_epoch(sql("unlock_key")), lock_key)

    async def next_due_in(self, queue: str) -> float | None:
        """Seconds until the next delayed job of the queue is due, or a rate limit's window opens
        for its runnable jobs (None: nothing delayed)."""
        return (await self.next_due(queue)).due_in

    async def next_due(self, queue: str) -> NextDue:
        """`next_due_in`, and whether the queue has limits (0022): which claim statement to use."""
        row = await self.conn.fetchrow(in_epoch(sql("next_due_in")), queue)
        return NextDue(due_in=row["due_in"], limited=row["limited"], fair=row["fair"])

    async def wake_queue(self, queue: str) -> None:
        """Wake the queue's workers on every node: a finish freed a slot of its global limit."""
        await self.conn.execute(in_epoch(sql("flow/wake_queue")), queue)

    async def heartbeat(self, attempts: list[tuple[uuid.UUID, int]]) -> dict[uuid.UUID, bool]:
        """Extend leases. Returns cancel_requested per attempt still held; fenced ones are absent."""
        return {job_id: cancel for job_id, (cancel, _) in (await self.heartbeat_and_backlog(attempts)).items()}

    async def heartbeat_and_backlog(self, attempts: list[tuple[uuid.UUID, int]]
                                    ) -> dict[uuid.UUID, tuple[bool, bool]]:
        """`heartbeat`, with each held attempt's (cancel_requested, key_backlog): whether jobs
        enqueued while it runs wait unparked behind its lock_key, enough to park (0017)."""
        rows = await self.conn.fetch(in_epoch(sql("heartbeat_jobs")), [a[0] for a in attempts],
                                     [a[1] for a in attempts])
        return {r["job_id"]: (r["cancel_requested"], r["key_backlog"]) for r in rows}

    async def finish(self, requests: list[FinishRequest], hold: HoldRule | None = None
                     ) -> dict[uuid.UUID, FinishResult]:
        """`hold`: the queue's held-jobs rule (dataloader/model/hold.py; None: nothing is held)."""
        if can_finish_with_claim(requests):
            rows = await self.conn.fetch(
                in_epoch(sql("finish_succeeded")),
                [r.job_id for r in requests], [r.attempt for r in requests], [r.max_attempts for r in requests],
                [r.lock_key for r in requests], [r.unlock for r in requests], _results(requests))
            return _finish_results(rows)
        rows = await self.conn.fetch(
            in_epoch(sql("finish_jobs")),
            [r.job_id for r in requests], [r.attempt for r in requests], [r.outcome for r in requests],
            [r.error for r in requests], [r.fatal for r in requests], [r.max_attempts for r in requests],
            [float(r.delay_sec) for r in requests], [r.reason for r in requests],
            [r.lock_key for r in requests], [r.unlock for r in requests], _results(requests),
            [r.next_json for r in requests],
            bool(hold and hold.exhausted), list(hold.errors) if hold and hold.errors else None,
            [r.span for r in requests],
        )
        return _finish_results(rows)

    async def finish_one(self, request: FinishRequest) -> FinishResult:
        return (await self.finish([request]))[request.job_id]

    async def relock(self, attempts: list[tuple[uuid.UUID, int, str]]) -> dict[uuid.UUID, tuple[bool, bool]]:
        """Retake locks after a reconnect: (still ours in the table, lock taken) per attempt."""
        rows = await self.conn.fetch(in_epoch(sql("relock_jobs")), [a[0] for a in attempts], [a[1] for a in attempts],
                                     [a[2] for a in attempts])
        return {r["job_id"]: (r["alive"], bool(r["locked"])) for r in rows}

    async def lock_holders(self, job_id: uuid.UUID, lock_key: str) -> tuple[int, bool]:
        """After a failed lock: (running jobs holding the key, whether the lock is ours now)."""
        row = await self.conn.fetchrow(in_epoch(sql("lock_holders")), job_id, lock_key)
        assert row is not None
        return row["running_holders"], row["locked_now"]


def _results(requests: list[FinishRequest]) -> list[str | None]:
    """The finishes' results as stored: encrypted at rest with DL_ENCRYPTION_KEYS (one envelope
    each, model/payload_crypto.py), else the JSON text as it is."""
    ring = payload_crypto.active()
    if ring is None:
        return [r.result_json for r in requests]
    return [ring.seal_text(r.result_json) for r in requests]
