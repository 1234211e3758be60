"""The operator's search over dl_jobs: a filtered page, a count, and the check of a
filter's jsonpath. Statements in `queries/search/`; each runs in a transaction planned with its
actual values (`custom_plans.sql`), which is what lets one statement with a dozen optional filters
use the right index for the ones given."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

import asyncpg

from dataloader.model.job import Job
from dataloader.model.job_filter import JobFilter
from dataloader.storage.queries import sql


def filter_params(f: JobFilter) -> tuple[Any, ...]:
    """$1..$12 of every statement with the filter block (search/jobs.sql's header)."""
    created_from, created_to, finished_from, finished_to = f.times
    return (f.queues, f.tasks, [s.value for s in f.statuses] if f.statuses else None, f.error_like(),
            created_from, created_to, finished_from, finished_to, f.args_contains, f.args_path,
            f.lock_key_prefix, f.held)


async def count_matches(conn: asyncpg.Connection, f: JobFilter, at_most: int | None, *,
                        created_until: datetime | None = None) -> int:
    """search/count.sql on `conn` (in a transaction begun with `begin_count`): the jobs matching
    `f`, at most `at_most` (None: all); `created_until` caps the filter's created_to (a bulk
    operation's snapshot)."""
    queues, tasks, statuses, error, c_from, c_to, f_from, f_to, contains, path, prefix, held = filter_params(f)
    if created_until is not None and (c_to is None or c_to > created_until):
        c_to = created_until
    return await conn.fetchval(sql("search/count"), queues, tasks, statuses, error, c_from, c_to, f_from, f_to,
                               contains, path, prefix, held, at_most)


async def begin_count(conn: asyncpg.Connection, timeout_sec: float | None) -> None:
    """The settings of a count's transaction: custom plans, and its own statement timeout when
    given (the API's count timeout; None keeps the connection's)."""
    await conn.execute(sql("search/custom_plans"))
    if timeout_sec is not None:
        await conn.execute(sql("search/count_timeout"), str(max(1, round(timeout_sec * 1000))))


class SearchRepository:
    def __init__(self, pool: asyncpg.Pool, *, count_timeout_sec: float | None = None) -> None:
        self.pool = pool
        self.count_timeout_sec = count_timeout_sec

    async def search(self, f: JobFilter, *, before: tuple[datetime, uuid.UUID] | None, limit: int) -> list[Job]:
        before_at, before_id = before if before is not None else (None, None)
        queues, tasks, statuses, error, c_from, c_to, f_from, f_to, contains, path, prefix, held = filter_params(f)
        async with self.pool.acquire() as conn, conn.transaction(readonly=True):
            await conn.execute(sql("search/custom_plans"))
            rows = await conn.fetch(sql("search/jobs"), queues, tasks, statuses, error, c_from, c_to, f_from, f_to,
                                    contains, path, prefix, held, before_at, before_id, limit)
        return [Job.from_row(row) for row in rows]

    async def count(self, f: JobFilter, *, at_most: int | None = None) -> int:
        async with self.pool.acquire() as conn, conn.transaction(readonly=True):
            await begin_count(conn, self.count_timeout_sec)
            return await count_matches(conn, f, at_most)

    async def check_jsonpath(self, path: str) -> str | None:
        """None when PostgreSQL parses `path`; else its complaint."""
        try:
            await self.pool.fetchval(sql("search/check_jsonpath"), path)
        except (asyncpg.exceptions.SyntaxOrAccessError, asyncpg.exceptions.DataError) as exc:
            return str(exc)
        return None
