"""Every claim statement keeps the rules every claim must keep, checked on each variant by name:
the plain claim (claim_jobs.sql), the limited one (claim_limited_jobs.sql), the fair one
(claim_jobs_fair.sql, with and without limits) and the step's finish-and-claim
(step_succeeded_claim.sql).

- A paused queue starts nothing, whichever claim its workers use (promise 12). Before this test a
  queue with limits kept claiming with `f.paused` dropped from claim_limited_jobs.sql: no test ran a
  paused limited or fair queue's claim. With the pause check taken out of a variant (its claim
  fence term, or on `main` the `f.paused` of its flow row), its case here fails.
- Each job a claim starts has exactly one 'picked' journal row, with the attempt, the worker and its session,
  committed with the start (promise 4): with the `journal` CTE of claim_gate_take.sql (the limited
  and fair claims) or claim_take.sql (the plain ones) emptied, its case here fails.

Each statement runs on a connection of its own, as a worker's (its advisory locks are session
locks), committed as a worker's claim is."""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator

import asyncpg
import pytest

from dataloader.storage.queue_connection import QueueConnection, step_claim_sql
from tests.support.engine import enqueue

# (flow row columns, claim flags) per variant
VARIANTS = {
    "plain": ({}, {}),
    "limited": ({"concurrency": 100}, {"limited": True}),
    "fair": ({"fair_share": True}, {"fair": True}),
    "fair_limited": ({"fair_share": True, "rate_limit": 1000, "rate_period_sec": 1.0}, {"fair": True}),
}


@pytest.fixture
async def conn(dsn: str, db) -> AsyncIterator[asyncpg.Connection]:
    c = await asyncpg.connect(dsn)
    try:
        yield c
    finally:
        await c.close()


async def queue_with_jobs(db: asyncpg.Pool, flow: dict[str, object], n: int = 4) -> str:
    queue = f"rules-{uuid.uuid4().hex[:8]}"
    for i in range(n):
        await enqueue(db, "dl.noop", queue=queue, partition_key=f"p{i % 2}")
    columns = ["queue", *flow]
    await db.execute(f"INSERT INTO dl_queue_flow ({', '.join(columns)}) "
                     f"VALUES ({', '.join(f'${i + 1}' for i in range(len(columns)))})", queue, *flow.values())
    return queue


async def step_claim(conn: asyncpg.Connection, queue: str, limit: int) -> list[uuid.UUID]:
    """step_succeeded_claim.sql with nothing to finish: only its claim."""
    rows = await conn.fetch(step_claim_sql(limit), queue, "node-step", [], [], [], [], [], [])
    return [r["job_id"] for r in rows if not r["finished"] and r["claimed"]]


async def claim(conn: asyncpg.Connection, variant: str, queue: str, limit: int = 4) -> list[uuid.UUID]:
    if variant == "step":
        return await step_claim(conn, queue, limit)
    batch = await QueueConnection(conn).claim(queue, f"node-{variant}", limit, **VARIANTS[variant][1])
    return [c.job_id for c in batch.claimed]


ALL = [*VARIANTS, "step"]


@pytest.mark.parametrize("variant", ALL)
async def test_a_paused_queue_starts_nothing_through_any_claim(db, conn, variant: str):
    queue = await queue_with_jobs(db, VARIANTS.get(variant, VARIANTS["plain"])[0])
    await db.execute("UPDATE dl_queue_flow SET paused = true, paused_at = now() WHERE queue = $1", queue)
    assert await claim(conn, variant, queue) == [], f"the {variant} claim started a job of a paused queue"
    await db.execute("UPDATE dl_queue_flow SET paused = false, paused_at = NULL WHERE queue = $1", queue)
    assert await claim(conn, variant, queue), f"the {variant} claim started nothing once resumed"


@pytest.mark.parametrize("variant", ALL)
async def test_a_paused_task_starts_nothing_through_any_claim(db, conn, variant: str):
    queue = await queue_with_jobs(db, VARIANTS.get(variant, VARIANTS["plain"])[0])
    await db.execute("INSERT INTO dl_task_flow (queue, task, paused, paused_at) VALUES ($1, 'dl.noop', true, now())",
                     queue)
    assert await claim(conn, variant, queue) == [], f"the {variant} claim started a job of a paused task"


@pytest.mark.parametrize("variant", ALL)
async def test_every_claim_writes_one_picked_row_per_start(db, conn, variant: str):
    queue = await queue_with_jobs(db, VARIANTS.get(variant, VARIANTS["plain"])[0])
    claimed = await claim(conn, variant, queue, limit=3)
    assert len(claimed) == 3, variant
    conn_pid = await conn.fetchval("SELECT pg_backend_pid()")
    worker = "node-step" if variant == "step" else f"node-{variant}"
    rows = await db.fetch("SELECT e.job_id, e.payload, j.attempt FROM dl_job_events e JOIN dl_jobs j USING (job_id) "
                          "WHERE e.queue = $1 AND e.kind = 'picked'", queue)
    assert sorted(r["job_id"] for r in rows) == sorted(claimed), f"the {variant} claim's 'picked' rows"
    for r in rows:
        payload = r["payload"] if isinstance(r["payload"], dict) else json.loads(r["payload"])
        # the session is the claiming connection's backend (the one holding the key; running_picked_by.sql)
        assert payload == {"attempt": r["attempt"], "worker": worker, "session": conn_pid}
