"""Pause and resume one task of a queue (issue 21 part B, docs/flow-control.md "Pausing one task"), in
one node: nothing of the paused task starts while the queue's other tasks run, enqueue still works,
a resume starts its backlog at once (it wakes the workers), a task's pause and the queue's are
independent, the state is durable and every face shows it. "The worker tried and got nothing" is
observed through the claim histogram of the queue, never assumed after a sleep."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import pytest

from dataloader import App, Settings
from dataloader.exceptions import ValidationFailed
from dataloader.storage.queue_connection import QueueConnection
from tests.conftest import wait_until
from tests.flow.test_pause import claims, now_in, statuses
from tests.support.engine import enqueue, running_engine


async def test_a_paused_task_starts_nothing_while_the_other_tasks_of_its_queue_run(dsn, db):
    queue = f"task-{uuid.uuid4().hex[:8]}"
    app = await App(Settings(db_dsn=dsn, workers=[])).open()
    try:
        paused = await app.pause_queue(queue, task="test.async_sleep")
        assert not paused.paused and set(paused.paused_tasks) == {"test.async_sleep"}
        async with running_engine(dsn, db, {queue: 4}):
            held = [await enqueue(db, "test.async_sleep", queue=queue, args={"seconds": 0.01}) for _ in range(3)]
            before = claims(queue)
            others = [await enqueue(db, "dl.noop", queue=queue) for _ in range(5)]
            await wait_until(now_in(db, others, {"succeeded": 5}), message="the other task runs")
            await wait_until(lambda: claims(queue) >= before + 1, message="claims after the pause")
            assert await statuses(db, held) == {"queued": 3}
            assert {r["attempt"] for r in await db.fetch("SELECT attempt FROM dl_jobs WHERE job_id = ANY($1)",
                                                         held)} == {0}

            # A queue's resume leaves a paused task paused; the task's resume wakes the workers.
            await app.pause_queue(queue)
            assert (await app.resume_queue(queue)).paused_tasks.keys() == {"test.async_sleep"}
            resumed = await app.resume_queue(queue, task="test.async_sleep")
            assert resumed.paused_tasks == {}
            await wait_until(now_in(db, held, {"succeeded": 3}), message="the resumed task's backlog runs")
            listed = {q.queue: q for q in await app.queues()}
            assert listed[queue].paused_tasks == {}
    finally:
        await app.close()


async def test_a_task_pause_is_durable_idempotent_and_named_by_queue(dsn, db):
    queue = f"task-{uuid.uuid4().hex[:8]}"
    app = await App(Settings(db_dsn=dsn, workers=[])).open()
    other = await App(Settings(db_dsn=dsn, workers=[])).open()
    try:
        first = await app.pause_queue(queue, task="load.cbr")
        again = await app.pause_queue(queue, task="load.cbr")
        assert first.paused_tasks == again.paused_tasks and isinstance(first.paused_tasks["load.cbr"], datetime)
        seen = {q.queue: q for q in await other.queues()}
        assert seen[queue].paused_tasks == first.paused_tasks  # a queue with no job is listed by its task
        assert f"{queue}-2" not in seen
        # another queue's jobs of the same task are not held
        async with db.acquire() as conn:
            job = await enqueue(db, "load.cbr", queue=f"{queue}-2")
            batch = await QueueConnection(conn).claim(f"{queue}-2", "test", 4)
            await conn.execute("SELECT pg_advisory_unlock_all()")
        assert [j.job_id for j in batch.claimed] == [job]
        assert (await other.resume_queue(queue, task="never.paused")).paused_tasks.keys() == {"load.cbr"}
    finally:
        await app.close()
        await other.close()


async def test_a_paused_task_wakes_no_worker_for_its_delayed_jobs(dsn, db):
    queue = f"task-{uuid.uuid4().hex[:8]}"
    app = await App(Settings(db_dsn=dsn, workers=[])).open()
    try:
        await enqueue(db, "dl.noop", queue=queue, available_at=datetime.now(UTC) + timedelta(seconds=30))
        async with db.acquire() as conn:
            nothing_due = await QueueConnection(conn).next_due_in(f"empty-{queue}")
            assert await QueueConnection(conn).next_due_in(queue) < 31
            await app.pause_queue(queue, task="dl.noop")
            assert await QueueConnection(conn).next_due_in(queue) == nothing_due
            await app.resume_queue(queue, task="dl.noop")
            assert await QueueConnection(conn).next_due_in(queue) < 31
    finally:
        await app.close()


@pytest.mark.parametrize("task, problem", [("", "task: must be 1 to 200 characters"), (" ", "task: must not be blank"),
                                           ("a\x00b", "task: must not contain NUL"), ("t" * 201, "task: must be 1 to")])
async def test_a_bad_task_name_is_refused_and_writes_nothing(dsn, db, task, problem):
    app = await App(Settings(db_dsn=dsn, workers=[])).open()
    try:
        with pytest.raises(ValidationFailed, match=problem.replace("(", r"\(")):
            await app.pause_queue("q", task=task)
        assert await db.fetchval("SELECT count(*) FROM dl_task_flow WHERE queue = 'q'") == 0
    finally:
        await app.close()


def task_metric(text: str, queue: str, task: str) -> float | None:
    for line in text.splitlines():
        if line.startswith(f'dl_task_paused{{queue="{queue}",task="{task}"}} '):
            return float(line.rsplit(" ", 1)[1])
    return None


async def test_http_cli_and_the_metric_pause_and_resume_one_task(dsn, db, cli_env):
    import asyncio
    import json

    import httpx

    from dataloader.api import create_app
    from tests.support.cli import run

    queue = f"task-{uuid.uuid4().hex[:8]}"
    app = await App(Settings(db_dsn=dsn, workers=[])).open()
    try:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=create_app(app.settings, context=app)),
                                     base_url="http://t") as http:
            paused = await http.post(f"/api/v1/queues/{queue}/pause", params={"task": "load/cbr x"})
            assert paused.status_code == 200, paused.text
            assert list(paused.json()["paused_tasks"]) == ["load/cbr x"] and paused.json()["paused"] is False
            assert task_metric((await http.get("/metrics")).text, queue, "load/cbr x") == 1.0
            bad = await http.post(f"/api/v1/queues/{queue}/pause", params={"task": " "})
            assert bad.status_code == 422 and bad.json()["error"] == "validation_error"
            result = await asyncio.to_thread(run, ["queues", "resume", queue, "--task", "load/cbr x"], cli_env)
            assert result.returncode == 0, result.stderr
            assert json.loads(result.stdout)["paused_tasks"] == {}
            assert task_metric((await http.get("/metrics")).text, queue, "load/cbr x") == 0.0
            openapi = (await http.get("/openapi.json")).json()
            params = openapi["paths"]["/api/v1/queues/{queue}/pause"]["post"]["parameters"]
            assert any(p["name"] == "task" and p["in"] == "query" for p in params)
    finally:
        await app.close()
