"""`app.queue_depths()`, `GET /api/v1/stats/depths` and `dataloader queues depths` (what the
overview shows): due, delayed, running and held jobs per queue and the oldest due job's age, the
same through every face."""

from __future__ import annotations

import asyncio
import json
import uuid
from datetime import UTC, datetime, timedelta

from dataloader import App, Settings
from tests.support.cli import invoke
from tests.support.engine import enqueue
from tests.ui.conftest import console_client


async def test_depths_count_each_state_and_both_faces_agree(db, dsn):
    queue = f"depth-{uuid.uuid4().hex[:8]}"
    for _ in range(3):
        await enqueue(db, "dl.noop", queue=queue)
    await enqueue(db, "dl.noop", queue=queue, available_at=datetime.now(UTC) + timedelta(hours=1))
    running = await enqueue(db, "dl.noop", queue=queue)
    held = await enqueue(db, "dl.noop", queue=queue)
    failed = await enqueue(db, "dl.noop", queue=queue)
    await db.execute("UPDATE dl_jobs SET status = 'running', started_at = now() WHERE job_id = $1", running)
    await db.execute("UPDATE dl_jobs SET status = 'failed', finished_at = now(), held_at = now() WHERE job_id = $1",
                     held)
    await db.execute("UPDATE dl_jobs SET status = 'failed', finished_at = now() WHERE job_id = $1", failed)
    # An odd row (a created_at far in the future) must not break the read or give a negative age.
    odd = await enqueue(db, "dl.noop", queue=queue)
    await db.execute("UPDATE dl_jobs SET created_at = 'infinity' WHERE job_id = $1", odd)

    app = await App(Settings(db_dsn=dsn, workers=[])).open()
    try:
        depths = {d.queue: d for d in await app.queue_depths()}
    finally:
        await app.close()
    mine = depths[queue]
    assert (mine.queued, mine.delayed, mine.running, mine.held) == (4, 1, 1, 1)
    assert mine.oldest_waiting_sec is not None and 0 <= mine.oldest_waiting_sec < 600

    async with console_client(dsn) as client:
        answer = await client.get("/api/v1/stats/depths")
        assert answer.status_code == 200, answer.text
        by_queue = {q["queue"]: q for q in answer.json()["queues"]}
        assert {k: v for k, v in by_queue[queue].items() if k != "oldest_waiting_sec"} == {
            "queue": queue, "queued": 4, "delayed": 1, "running": 1, "held": 1}
        schema = (await client.get("/openapi.json")).json()
        assert "/api/v1/stats/depths" in schema["paths"]

    result = await asyncio.to_thread(invoke, ["queues", "depths"], {"DL_DB_DSN": dsn})
    assert result.exit_code == 0, result.output
    by_queue = {q["queue"]: q for q in json.loads(result.stdout)}
    assert (by_queue[queue]["queued"], by_queue[queue]["delayed"], by_queue[queue]["held"]) == (4, 1, 1)
