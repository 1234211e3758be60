"""DESIGN promise 6 (no busy polling) without a slow path: an idle worker wakes at each delayed
job's due time. Two retries due ~15 ms apart both run at once: the worker's DueTimer keeps every
due time it is given, not only the earliest. (It used to keep the earliest only; the claim that
time woke found the first job, so it asked the database for no further due time, and the second
retry waited for the fallback poll, 30 s here.)"""

from __future__ import annotations

import uuid

from tests.conftest import wait_until
from tests.support.engine import enqueue, running_engine

FALLBACK_POLL_SEC = 30  # far beyond the bound below: only a due-time wake-up meets it
PROMPT_SEC = 2.0  # from each retry's due time to its second attempt's start, at most


async def test_two_retries_due_15_ms_apart_both_run_at_their_due_time(dsn, db):
    queue = f"retries-{uuid.uuid4().hex[:6]}"
    async with running_engine(dsn, db, queues={queue: 4}, run_reaper=False,
                              poll_fallback_sec=FALLBACK_POLL_SEC):
        # Claimed by one claim, they raise Retry together: one finish step requeues both.
        first = await enqueue(db, "test.retry_once", queue=queue, args={"seconds": 0.5})
        second = await enqueue(db, "test.retry_once", queue=queue, args={"seconds": 0.515})

        async def both_done() -> bool:
            done = await db.fetchval("SELECT count(*) FROM dl_jobs WHERE job_id = ANY($1) AND status = 'succeeded'",
                                     [first, second])
            return done == 2

        await wait_until(both_done, timeout=PROMPT_SEC + 3, message="both retries to run")
    late = await db.fetch(
        """SELECT e.job_id, extract(epoch FROM e.ts - r.available_at)::float8 AS late_sec
           FROM dl_job_events e
           JOIN LATERAL (SELECT (p.payload->>'available_at')::timestamptz AS available_at
                         FROM dl_job_events p WHERE p.job_id = e.job_id AND p.kind = 'requeue') r ON true
           WHERE e.job_id = ANY($1) AND e.kind = 'picked' AND (e.payload->>'attempt')::int = 2""",
        [first, second])
    assert len(late) == 2, late
    for row in late:
        assert row["late_sec"] < PROMPT_SEC, f"a retry started {row['late_sec']:.2f} s after its due time"
