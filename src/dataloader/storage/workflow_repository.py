"""SQL of durable workflows (`queries/workflows/*.sql`) on the pool.

Every write a run's attempt makes to its history is fenced on the run's job (running, with that
attempt) and writes its journal row in the same statement, so a run that lost its job to the
reaper records nothing, and the journal is the true history (promises 3, 4). Starting runs — a
top-level one or a gather's children — inserts their jobs and their run rows in one transaction,
with the gather's join counter when there is one, so a child can never end before the counter
that counts it exists.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import asyncpg

from dataloader.model.payload_crypto import seal_text
from dataloader.model.workflow import EarlierChild, Recorded, WorkflowRun, WorkflowRunSummary
from dataloader.storage.executor import Executor, InTransaction, Pooled
from dataloader.storage.queries import sql
from dataloader.storage.repositories import JobRepository, NewJob


@dataclass(frozen=True, slots=True)
class History:
    """What a run's attempt replays from: the wake count it read and its recorded positions."""

    wakes: int
    steps: dict[int, Recorded]
    lease_ttl_sec: int = 60
    # the seconds the attempt's lease had left at the read, by the database's clock (None: unknown)
    lease_left_sec: float | None = None
    # the seconds the run's deadline had left at the read (negative: passed; None: no deadline)
    deadline_left_sec: float | None = None
    # how many times the run was restarted: the jobs it starts derive their ids from it (workflows/derived.py)
    generation: int = 0


@dataclass(frozen=True, slots=True)
class Written:
    """A fenced write: `live` false means the attempt no longer holds the run (nothing written);
    `step` is the row as this write stored it, or None when it was already recorded otherwise."""

    live: bool
    step: Recorded | None
    lease_left_sec: float | None = None  # as History's, at this write


@dataclass(frozen=True, slots=True)
class ChildEnd:
    run_id: uuid.UUID
    status: str | None  # None: the child's job is gone (deleted)
    result: str | None  # JSON text
    error: str | None


class WorkflowRepository:
    """`on`: where `record` writes (the pool; `in_transaction` gives one that writes in a step's
    transaction). The other statements run on the pool, each transaction opened here."""

    def __init__(self, pool: asyncpg.Pool) -> None:
        self.pool = pool
        self.on: Executor = Pooled(pool)

    def in_transaction(self, conn: asyncpg.Connection) -> WorkflowRepository:
        """This repository with `record` in `conn`'s transaction (a `transaction=True` step's, so
        the step's writes and its record commit together)."""
        bound = WorkflowRepository(self.pool)
        bound.on = InTransaction(conn)
        return bound

    async def start(self, jobs: list[NewJob], workflows: list[str], *, parent: tuple[uuid.UUID, int] | None = None,
                    gather: tuple[int, str, int, str, int, bool] | None = None,
                    traceparent: str | None = None, deadline_sec: float | None = None) -> list[uuid.UUID] | None:
        """Insert run jobs and their run rows in one transaction; returns the ids inserted (a run
        whose idempotency key exists is skipped; None: the parent no longer holds its job).
        `parent`: (parent run id, gather seq) of children. `gather`: (attempt, name, children,
        child ids JSON, seq, fail_fast) — the parent's pending gather, its join counter set to the number of
        children, written first and fenced: a parent that lost its job starts nothing. `traceparent`:
        the span every attempt of these runs is a child of (one trace per run). `deadline_sec`: from
        now to the runs' deadline (None: children get their parent's, a top-level run none)."""
        async with self.pool.acquire() as conn, conn.transaction():
            if gather is not None and parent is not None:
                attempt, name, count, ids_json, seq, fail_fast = gather
                row = await conn.fetchrow(sql("workflows/record_step"), *_record_params(
                    parent[0], attempt, seq, "gather", name, "pending", ids_json, None, 0, None, count, fail_fast,
                    None))
                if not row["live"]:
                    return None
            tx = InTransaction(conn)
            inserted = await JobRepository(tx).insert_jobs(jobs, tx, "workflow", traceparent=traceparent)
            names = {j.job_id: w for j, w in zip(jobs, workflows, strict=True)}
            await conn.execute(sql("workflows/insert_runs"), inserted, [names[i] for i in inserted],
                               parent[0] if parent else None, parent[1] if parent else None, deadline_sec)
            return inserted

    async def start_step_job(self, run_id: uuid.UUID, attempt: int, seq: int, name: str, job: NewJob, *,
                             traceparent: str | None = None) -> Written:
        """Record position `seq` as a pending step whose step job is `job` (its join counter at 1)
        and insert that job, in one transaction fenced on the run's attempt: a run that lost its job
        starts nothing, and the job never exists without the record that counts its end (0036)."""
        async with self.pool.acquire() as conn, conn.transaction():
            row = await conn.fetchrow(sql("workflows/record_step"), *_record_params(
                run_id, attempt, seq, "step", name, "pending", None, None, 0, None, 1, False, job.job_id))
            if not row["live"]:
                return Written(False, None)
            if row["seq"] is None or row["job_id"] != job.job_id:  # recorded otherwise already: start nothing
                return Written(True, await self._get_step_on(conn, run_id, seq), row["lease_left_sec"])
            tx = InTransaction(conn)
            await JobRepository(tx).insert_jobs([job], tx, "workflow", traceparent=traceparent)
            return Written(True, Recorded.from_row(row), row["lease_left_sec"])

    async def record_by_step_job(self, job_id: uuid.UUID, attempt: int, run_id: uuid.UUID, seq: int, state: str, *,
                                 result_json: str | None = None, error: str | None = None, attempts: int = 0,
                                 wake_in_sec: float | None = None) -> Written:
        """A step job's record of its position on its run's history, fenced on the step job's
        attempt (record_step_job.sql), on this repository's executor (`in_transaction`: a
        transactional step's)."""
        row = await self.on.fetchrow(sql("workflows/record_step_job"), job_id, attempt, run_id, seq, state,
                                     seal_text(result_json), error, attempts, wake_in_sec)
        return await self._written(row, run_id, seq)

    async def history(self, run_id: uuid.UUID, attempt: int = 0) -> History | None:
        rows = await self.pool.fetch(sql("workflows/load_history"), run_id, attempt)
        if not rows:
            return None
        return History(rows[0]["wakes"], {r["seq"]: Recorded.from_row(r) for r in rows if r["seq"] is not None},
                       rows[0]["lease_ttl_sec"] or 60, rows[0]["lease_left_sec"], rows[0]["deadline_left_sec"],
                       rows[0]["generation"])

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[asyncpg.Connection]:
        """A connection in a transaction of its own, for a step that records itself in it."""
        async with self.pool.acquire() as conn, conn.transaction():
            yield conn

    async def record(self, run_id: uuid.UUID, attempt: int, seq: int, kind: str, name: str, state: str, *,
                     result_json: str | None = None, error: str | None = None, attempts: int = 0,
                     wake_in_sec: float | None = None, remaining: int | None = None) -> Written:
        """Written on this repository's executor: the pool, or a transactional step's transaction
        (`in_transaction`)."""
        row = await self.on.fetchrow(sql("workflows/record_step"), *_record_params(
            run_id, attempt, seq, kind, name, state, result_json, error, attempts, wake_in_sec, remaining, False,
            None))
        return await self._written(row, run_id, seq)

    async def step_may_start(self, run_id: uuid.UUID, attempt: int) -> float | None:
        """The seconds the attempt's lease has left (None: it no longer holds the run)."""
        return await self.pool.fetchval(sql("workflows/step_may_start"), run_id, attempt)

    async def take_signal(self, run_id: uuid.UUID, attempt: int, seq: int, name: str) -> Written:
        row = await self.pool.fetchrow(sql("workflows/take_signal"), run_id, attempt, seq, name)
        return await self._written(row, run_id, seq)

    async def _written(self, row: Any, run_id: uuid.UUID, seq: int) -> Written:
        if not row["live"]:
            return Written(False, None)
        left = row.get("lease_left_sec")
        if row["seq"] is not None:
            return Written(True, Recorded.from_row(row), left)
        return Written(True, await self.get_step(run_id, seq), left)

    async def get_step(self, run_id: uuid.UUID, seq: int) -> Recorded | None:
        return await self._get_step_on(self.pool, run_id, seq)

    async def _get_step_on(self, on: Any, run_id: uuid.UUID, seq: int) -> Recorded | None:
        row = await on.fetchrow(sql("workflows/get_step"), run_id, seq)
        return None if row is None else Recorded.from_row(row)

    async def mark_seen(self, run_id: uuid.UUID, attempt: int, wakes: int) -> None:
        await self.pool.execute(sql("workflows/mark_seen"), run_id, attempt, wakes)

    async def children(self, run_ids: list[uuid.UUID]) -> list[ChildEnd]:
        rows = await self.pool.fetch(sql("workflows/children"), run_ids)
        return [ChildEnd(r["run_id"], r["status"], r["result"], r["error"]) for r in rows]

    async def send_signal(self, run_id: uuid.UUID, name: str, payload_json: str | None) -> tuple[str | None, bool]:
        """(the run's job status or None when there is no such run, whether the signal was stored).
        A stored signal wakes the run in the same transaction."""
        async with self.pool.acquire() as conn, conn.transaction():
            row = await conn.fetchrow(sql("workflows/send_signal"), run_id, name, seal_text(payload_json))
            if row is None:
                return None, False
            if row["signal_id"] is None:
                return row["status"], False
            await conn.execute(sql("workflows/wake"), run_id)
            return row["status"], True

    async def issue_token(self, run_id: uuid.UUID, attempt: int, seq: int, name: str, fresh: str) -> str | None:
        """The wait token of position `seq` (`fresh` unless one was made there); None: fenced off."""
        return await self.pool.fetchval(sql("workflows/issue_token"), run_id, attempt, seq, name, fresh)

    async def complete_token(self, token: str, payload_json: str | None) -> tuple[uuid.UUID, str, bool] | None:
        """(run id, its job's status, whether this completion was stored); None: no such token. A
        stored completion wakes the run in the same transaction."""
        async with self.pool.acquire() as conn, conn.transaction():
            row = await conn.fetchrow(sql("workflows/complete_token"), token, seal_text(payload_json))
            if row is None:
                return None
            if row["signal_id"] is not None:
                await conn.execute(sql("workflows/wake"), row["run_id"])
            return row["run_id"], row["status"], row["signal_id"] is not None

    async def get_run(self, run_id: uuid.UUID, *, with_steps: bool = True) -> WorkflowRun | None:
        row = await self.pool.fetchrow(sql("workflows/get_run"), run_id)
        if row is None:
            return None
        steps = ([Recorded.from_row(r) for r in await self.pool.fetch(sql("workflows/list_steps"), run_id)]
                 if with_steps else [])
        earlier = ([EarlierChild.from_row(r) for r in await self.pool.fetch(sql("workflows/earlier_children"), run_id)]
                   if with_steps and row["generation"] else [])
        return WorkflowRun.from_row(row, steps, earlier)

    async def list_runs(self, *, workflow: str | None, statuses: list[str] | None,
                        before: tuple[Any, uuid.UUID] | None, limit: int) -> list[WorkflowRunSummary]:
        """Runs newest first after `before` (the (created_at, run_id) of the previous page's last run).
        Planned with its values (custom plans, as the jobs search is): a cached generic plan serves
        every filter at once and walks dl_jobs whole (tests/storage/test_plan_stability.py)."""
        async with self.pool.acquire() as conn, conn.transaction(readonly=True):
            await conn.execute(sql("search/custom_plans"))
            rows = await conn.fetch(sql("workflows/list_runs"), workflow, statuses,
                                    before[0] if before else None, before[1] if before else None, limit)
        return [WorkflowRunSummary.from_row(r) for r in rows]

    async def run_by_key(self, idempotency_key: str) -> uuid.UUID | None:
        return await self.pool.fetchval(sql("workflows/run_by_key"), idempotency_key)

    async def restart_cut(self, run_id: uuid.UUID, from_seq: int) -> Any:
        """restart_cut.sql's row (status, removed, generation), or None: no such run."""
        return await self.pool.fetchrow(sql("workflows/restart_cut"), run_id, from_seq)

    async def stale_children(self, run_id: uuid.UUID) -> list[uuid.UUID]:
        """The unfinished runs below `run_id` started by a generation a restart left, nearest first."""
        return [r["run_id"] for r in await self.pool.fetch(sql("workflows/stale_children"), run_id)]

    async def cancel_stale_children(self, run_id: uuid.UUID) -> int:
        """Cancel them (as a cancel does: a queued one at once, a running one at its next await);
        how many there were."""
        stale = await self.stale_children(run_id)
        jobs = JobRepository(self.pool)
        for job_id in stale:
            await jobs.cancel_job(job_id)
        return len(stale)

    async def cancel_runs(self, run_ids: list[uuid.UUID]) -> None:
        """Cancel the jobs of these runs as a cancel does (a queued one at once, a running one at its
        next await), with every run and step job below them that has not ended."""
        jobs = JobRepository(self.pool)
        for run_id in run_ids:
            for job_id in [run_id, *await self.unfinished_descendants(run_id)]:
                await jobs.cancel_job(job_id)

    async def unfinished_descendants(self, run_id: uuid.UUID) -> list[uuid.UUID]:
        return [r["run_id"] for r in await self.pool.fetch(sql("workflows/unfinished_descendants"), run_id)]

    async def lock_runs(self, run_ids: list[uuid.UUID]) -> None:
        """Lock these runs' jobs in this order, in the caller's transaction (a repository made on a
        connection: a bulk cancel's batch)."""
        await self.pool.fetch(sql("workflows/lock_runs"), run_ids)


def _record_params(run_id: uuid.UUID, attempt: int, seq: int, kind: str, name: str, state: str,
                   result_json: str | None, error: str | None, attempts: int, wake_in_sec: float | None,
                   remaining: int | None, fail_fast: bool, job_id: uuid.UUID | None) -> tuple[Any, ...]:
    """$1..$13 of record_step.sql (its header)."""
    return (run_id, attempt, seq, kind, name, state, seal_text(result_json), error, attempts, wake_in_sec, remaining,
            fail_fast, job_id)
