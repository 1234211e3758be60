"""finish_succeeded.sql, the finish of a batch where every attempt succeeded without a chain stage,
writes exactly what finish_jobs.sql writes for such an attempt: same row, same journal row, the lock
released, and a fenced-off attempt refused."""

from __future__ import annotations

import json
import uuid

from dataloader.storage.queries import sql
from dataloader.storage.queue_connection import FinishRequest, QueueConnection
from tests.support.engine import enqueue

COMPARED = ("status", "attempt", "error", "lease_expires_at", "max_attempts", "result", "chain_id", "held_at",
            "held_reason", "started_at IS NOT NULL AS started", "finished_at IS NOT NULL AS finished",
            "available_at <= now() AS available")


async def _row_and_journal(db, job_id) -> tuple[dict, list]:
    row = await db.fetchrow(f"SELECT {', '.join(COMPARED)} FROM dl_jobs WHERE job_id = $1", job_id)
    events = await db.fetch("SELECT kind, payload FROM dl_job_events WHERE job_id = $1 ORDER BY event_id", job_id)
    return dict(row), [(e["kind"], e["payload"]) for e in events]


async def _held(conn, key: str) -> bool:
    return await conn.fetchval("SELECT count(*) > 0 FROM pg_locks WHERE locktype = 'advisory'"
                               " AND pid = pg_backend_pid() AND objid::int4 = hashtext($1)", key)


async def test_the_success_only_finish_writes_what_the_general_finish_writes(db):
    queue = f"finish-{uuid.uuid4().hex[:6]}"
    fast_id = await enqueue(db, queue=queue, max_attempts=5)
    general_id = await enqueue(db, queue=queue, max_attempts=5)
    async with db.acquire() as conn:
        qc = QueueConnection(conn)
        fast, general = (await qc.claim(queue, "test", 2)).claimed
        assert {fast.job_id, general.job_id} == {fast_id, general_id}
        result = json.dumps({"rows": 3})
        done = await qc.finish([FinishRequest(job_id=fast.job_id, attempt=fast.attempt, outcome="succeeded",
                                              lock_key=fast.lock_key, unlock=True, max_attempts=7,
                                              result_json=result)])
        rows = await conn.fetch(sql("finish_jobs"), [general.job_id], [general.attempt], ["succeeded"], [None],
                                [False], [7], [0.0], [None], [general.lock_key], [True], [result], [None],
                                False, None, [None])
        assert done[fast.job_id].status == rows[0]["status"] == "succeeded"
        assert not await _held(conn, fast.lock_key) and not await _held(conn, general.lock_key)
        fenced = await qc.finish([FinishRequest(job_id=fast.job_id, attempt=fast.attempt, outcome="succeeded",
                                                lock_key=fast.lock_key, unlock=False)])
        assert fenced[fast.job_id].status is None, "a second finish of an ended attempt must be refused"
    fast_row, fast_journal = await _row_and_journal(db, fast_id)
    general_row, general_journal = await _row_and_journal(db, general_id)
    assert fast_row == general_row
    assert fast_row["max_attempts"] == 7 and fast_row["result"] == {"rows": 3}
    assert fast_journal == general_journal
    assert fast_journal[-1] == ("done", {"attempt": 1})
