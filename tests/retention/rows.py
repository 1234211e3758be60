"""Hand-made job rows for the retention and stats tests: a job in any state with the journal rows
the engine would have written, at chosen times (seconds before now)."""

from __future__ import annotations

import uuid

import asyncpg

INSERT_JOB = """
INSERT INTO dl_jobs (job_id, queue, task, lock_key, status, attempt, created_at, available_at,
                     started_at, finished_at, error)
VALUES ($1, $2, 'dl.noop', $10, $3::dl_status, $4,
        now() - make_interval(secs => $5), now() - make_interval(secs => $6),
        now() - make_interval(secs => $7), now() - make_interval(secs => $8), $9)
"""
INSERT_EVENT = """
INSERT INTO dl_job_events (job_id, queue, kind, ts, payload)
VALUES ($1, $2, $3, now() - make_interval(secs => $4), '{}'::jsonb)
"""


async def add_job(db: asyncpg.Pool, *, queue: str = "q", status: str = "succeeded",
                  finished_ago: float | None = 0.0, created_ago: float | None = None,
                  available_ago: float | None = None, picked_ago: float | None = None,
                  error: str | None = None, events: bool = True) -> uuid.UUID:
    """A job finished `finished_ago` seconds ago (None: not finished). It was enqueued
    `created_ago` and due `available_ago` seconds ago (default: both at its pick, or its finish),
    and claimed `picked_ago` seconds ago (None: never ran)."""
    job_id = uuid.uuid4()
    base = picked_ago if picked_ago is not None else (finished_ago or 0.0)
    created_ago = base if created_ago is None else created_ago
    available_ago = created_ago if available_ago is None else available_ago
    await db.execute(INSERT_JOB, job_id, queue, status, 1 if picked_ago is not None else 0, created_ago,
                     available_ago, picked_ago, finished_ago, error, str(job_id))
    if events:
        await db.execute(INSERT_EVENT, job_id, queue, "queued", created_ago)
        if picked_ago is not None:
            await db.execute(INSERT_EVENT, job_id, queue, "picked", picked_ago)
        if finished_ago is not None:
            await db.execute(INSERT_EVENT, job_id, queue, status, finished_ago)
    return job_id


async def exists(db: asyncpg.Pool, job_id: uuid.UUID) -> tuple[bool, int]:
    """(the job row exists, how many journal rows it has)."""
    return (await db.fetchval("SELECT count(*) FROM dl_jobs WHERE job_id = $1", job_id) == 1,
            await db.fetchval("SELECT count(*) FROM dl_job_events WHERE job_id = $1", job_id))
