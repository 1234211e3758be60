"""SQL of periodic schedules (`queries/schedules/*.sql`) on the pool, returning typed values
(`Schedule`, `ScheduleRun`). The fire — the compare-and-set that moves a schedule to its next tick,
the tick's jobs and their history rows — is one transaction here, so a tick enqueues once however
many schedulers race for it."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import asyncpg

from dataloader.model.schedule import Schedule, ScheduleRun, ScheduleSpec
from dataloader.storage.executor import Pooled
from dataloader.storage.queries import sql
from dataloader.storage.repositories import JobRepository, NewJob


@dataclass(frozen=True, slots=True)
class FiredTick:
    tick_at: datetime
    job_id: uuid.UUID
    lag_sec: float
    skipped_before: int


class ScheduleRepository:
    def __init__(self, pool: asyncpg.Pool) -> None:
        self.pool = pool

    async def insert(self, spec: ScheduleSpec, next_run_at: datetime) -> Schedule | None:
        """Create; None when the name exists."""
        row = await self.pool.fetchrow(sql("schedules/insert_schedule"), *_spec_params(spec, next_run_at))
        return None if row is None else Schedule.from_row(row)

    async def upsert_declared(self, spec: ScheduleSpec, next_run_at: datetime) -> bool | None:
        """Upsert a code-declared schedule: True inserted, False updated, None left as it was."""
        row = await self.pool.fetchrow(sql("schedules/upsert_declared"), *_spec_params(spec, next_run_at))
        return None if row is None else bool(row["inserted"])

    async def get(self, name: str) -> Schedule | None:
        row = await self.pool.fetchrow(sql("schedules/get_schedule"), name)
        return None if row is None else Schedule.from_row(row)

    async def list(self) -> list[Schedule]:
        return [Schedule.from_row(r) for r in await self.pool.fetch(sql("schedules/list_schedules"))]

    async def set_paused(self, name: str, paused: bool, next_run_at: datetime | None) -> Schedule | None:
        row = await self.pool.fetchrow(sql("schedules/set_paused"), name, paused, next_run_at)
        return None if row is None else Schedule.from_row(row)

    async def delete(self, name: str) -> bool:
        return await self.pool.fetchrow(sql("schedules/delete_schedule"), name) is not None

    async def history(self, name: str, before: datetime | None, limit: int) -> list[ScheduleRun]:
        rows = await self.pool.fetch(sql("schedules/list_runs"), name, before, limit)
        return [ScheduleRun.from_row(r) for r in rows]

    async def due(self, now: datetime, limit: int) -> list[Schedule]:
        return [Schedule.from_row(r) for r in await self.pool.fetch(sql("schedules/due_schedules"), now, limit)]

    async def next_due_at(self) -> datetime | None:
        return await self.pool.fetchval(sql("schedules/next_due_at"))

    async def prune_runs(self, days: int, batch: int) -> int:
        return await self.pool.fetchval(sql("schedules/prune_runs"), days, batch)

    async def fire(self, schedule: Schedule, next_run_at: datetime | None, jobs: list[NewJob],
                   ticks: list[FiredTick], *, traceparent: str | None = None) -> list[FiredTick] | None:
        """Move `schedule` (at the revision it was read) to `next_run_at` and enqueue `jobs` (one
        per tick, same order, each with its tick's idempotency key and `job_id`), in one
        transaction. None: another scheduler fired it first, or it changed (nothing written).
        Otherwise the ticks whose job was inserted (a tick whose key already named a job is left
        out, and gets no history row). `traceparent`: the tick's span, the jobs' parent (None: not traced)."""
        last_run_at = ticks[-1].tick_at if ticks else None
        async with Pooled(self.pool).transaction() as tx:
            won = await tx.fetchrow(sql("schedules/advance_schedule"), schedule.name, schedule.revision,
                                    next_run_at, last_run_at)
            if won is None:
                return None
            if not jobs:
                return []
            inserted = set(await JobRepository(tx).insert_jobs(jobs, tx, "schedule", traceparent=traceparent))
            fired = [t for t in ticks if t.job_id in inserted]
            if fired:
                await tx.execute(sql("schedules/insert_runs"), schedule.name, [t.tick_at for t in fired],
                                   [t.job_id for t in fired], [t.lag_sec for t in fired],
                                   [t.skipped_before for t in fired])
            return fired


def _spec_params(spec: ScheduleSpec, next_run_at: datetime) -> tuple[Any, ...]:
    """$1..$16 of insert_schedule.sql and upsert_declared.sql (insert_schedule.sql's header)."""
    return (spec.name, spec.task, spec.queue, spec.args_json(), spec.cron, spec.timing().every_ms, spec.tz,
            spec.missed.value, spec.catch_up_limit, spec.grace_sec, spec.lock_key, spec.priority, spec.max_attempts,
            spec.lease_ttl_sec, spec.paused, next_run_at)
