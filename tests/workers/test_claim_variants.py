"""The two claim statements agree (issue 21): claim_jobs.sql, and claim_limited_jobs.sql (the same
claim with the flow gate, used for a queue with limits) claim the same jobs in the same order and
answer the same for a queue with no limit, whatever its lock keys, partition keys, priorities and
delays. Each claim runs in a transaction that is rolled back, so both see the same table."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

from dataloader.storage.queue_connection import claim_limited_sql, claim_sql
from tests.support.engine import enqueue

COMMON = ("job_id", "queue", "task", "lock_key", "partition_key", "attempt", "claimed", "asked_lock", "key_backlog",
          "key_parked_behind", "lock_hash")


async def _claim(db, text: str, queue: str) -> list[dict[str, object]]:
    async with db.acquire() as conn:
        tr = conn.transaction()
        await tr.start()
        try:
            rows = await conn.fetch(text, queue, "test")
        finally:
            await tr.rollback()
            await conn.execute("SELECT pg_advisory_unlock_all()")
    return [{k: r[k] for k in COMMON} for r in rows]


async def test_both_claims_take_the_same_jobs_of_an_unlimited_queue(db):
    queue = f"variants-{uuid.uuid4().hex[:8]}"
    later = datetime.now(UTC) + timedelta(hours=1)
    for i in range(40):
        delayed = {"available_at": later} if i % 9 == 0 else {}
        await enqueue(db, "dl.noop", queue=queue, lock_key=f"k{i % 7}", partition_key=f"p{i % 3}",
                      priority=100 - i % 4, **delayed)
    for limit in (1, 5, 16, 64):
        plain = await _claim(db, claim_sql(limit), queue)
        limited = await _claim(db, claim_limited_sql(limit), queue)
        assert plain and plain == limited, limit


async def test_the_plain_claim_leaves_a_limited_queue_to_the_gate(db):
    queue = f"variants-{uuid.uuid4().hex[:8]}"
    await enqueue(db, "dl.noop", queue=queue)
    await db.execute("INSERT INTO dl_queue_flow (queue, rate_limit, rate_period_sec) VALUES ($1, 5, 1)", queue)
    assert await _claim(db, claim_sql(4), queue) == []
    assert [r["claimed"] for r in await _claim(db, claim_limited_sql(4), queue)] == [True]
