"""The autoscaling signal through every face (issue 21 part B, docs/flow-control.md "Autoscaling"):
`app.queue_scaling`, `GET /api/v1/queues/{queue}/scaling`, `dataloader queues scaling`, the
`desired_workers` of every queue listing and the `dl_queue_desired_workers` metric agree, computed
from the database; a paused queue and a concurrency limit cap it; an odd row does not break it."""

from __future__ import annotations

import asyncio
import json
import uuid

import httpx
import pytest

from dataloader import App, Settings
from dataloader.api import create_app
from dataloader.exceptions import ValidationFailed
from tests.flow.test_fair_share import add_jobs
from tests.support.cli import run


def desired_metric(text: str, queue: str) -> float | None:
    for line in text.splitlines():
        if line.startswith(f'dl_queue_desired_workers{{queue="{queue}"}} '):
            return float(line.rsplit(" ", 1)[1])
    return None


async def test_every_face_reads_the_same_signal_and_the_caps_hold(dsn, db, cli_env):
    queue = f"scale-{uuid.uuid4().hex[:8]}"
    app = await App(Settings(db_dsn=dsn, workers=[])).open()
    try:
        await add_jobs(db, queue, "a", 30, age_sec=10)
        running = await add_jobs(db, queue, "a", 3, age_sec=20)
        await db.execute("UPDATE dl_jobs SET status = 'running', started_at = now() WHERE job_id = ANY($1)", running)
        done = await add_jobs(db, queue, "a", 6, age_sec=30)
        await db.execute("UPDATE dl_jobs SET status = 'succeeded', finished_at = now() WHERE job_id = ANY($1)", done)

        s = await app.queue_scaling(queue)
        # 3 busy slots finished 6 jobs in the last minute (0.1/s, 1/30 per slot): 30 runnable in 60 s
        # need 15 more slots; never more than the 30 jobs there are to run
        assert (s.runnable, s.running, s.desired_workers) == (30, 3, 18), s
        assert 9 <= s.oldest_age_sec < 60 and s.throughput_per_sec == pytest.approx(0.1)
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=create_app(app.settings, context=app)),
                                     base_url="http://t") as http:
            answer = await http.get(f"/api/v1/queues/{queue}/scaling")
            assert answer.status_code == 200, answer.text
            assert answer.json()["desired_workers"] == 18 and answer.json()["reason"] == s.reason
            assert (await http.get(f"/api/v1/queues/{queue}/scaling", params={"target_sec": 0})).status_code == 422
            listed = {q["queue"]: q for q in (await http.get("/api/v1/queues")).json()["queues"]}
            assert listed[queue]["desired_workers"] == 18
            assert desired_metric((await http.get("/metrics")).text, queue) == 18.0
        result = await asyncio.to_thread(run, ["queues", "scaling", queue], cli_env)
        assert result.returncode == 0, result.stderr
        assert json.loads(result.stdout)["desired_workers"] == 18

        await app.configure_queue(queue, concurrency=5)
        assert (await app.queue_scaling(queue)).desired_workers == 5
        await app.pause_queue(queue)
        assert (await app.queue_scaling(queue)).desired_workers == 3  # what still runs
        with pytest.raises(ValidationFailed):
            await app.queue_scaling(queue, target_sec=0)
    finally:
        await app.close()


async def test_an_odd_row_does_not_break_the_signal(dsn, db):
    queue = f"scale-{uuid.uuid4().hex[:8]}"
    app = await App(Settings(db_dsn=dsn, workers=[])).open()
    try:
        await add_jobs(db, queue, "a", 2, age_sec=10)
        await db.execute("UPDATE dl_jobs SET available_at = '-infinity' WHERE queue = $1", queue)
        s = await app.queue_scaling(queue)
        assert s.runnable == 2 and s.desired_workers == 1
        assert queue in {q.queue for q in await app.queues()}
        empty = await app.queue_scaling(f"{queue}-none")  # a queue with nothing wants nothing
        assert (empty.desired_workers, empty.runnable) == (0, 0)
    finally:
        await app.close()
