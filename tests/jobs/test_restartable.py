"""Restartable jobs (issue 10, seed 001's re-index): a trigger of a restartable job's lock_key
updates the queued job in place, or, while one runs, queues exactly one more run after it."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from dataloader import App, Queue, RestartConflict
from dataloader.api import create_app
from tests.conftest import wait_until
from tests.jobs.conftest import settings_for


async def test_a_trigger_while_queued_updates_args_and_time_of_the_same_job(app: App, runs):
    first = await app.enqueue("pattern.step", {"v": 1}, queue="idle", lock_key="index:1", restartable=True, delay=60)
    again = await app.enqueue("pattern.step", {"v": 2}, queue="idle", lock_key="index:1", restartable=True, delay=1)

    assert again.id == first.id and again.args == {"v": 2}
    assert again.available_at < first.available_at
    kinds = await runs.fetch("SELECT kind FROM dl_job_events WHERE job_id = $1 ORDER BY event_id", first.id)
    assert [k["kind"] for k in kinds] == ["queued", "retriggered"]
    assert await runs.fetchval("SELECT count(*) FROM dl_jobs") == 1


async def test_five_triggers_while_it_runs_give_exactly_one_more_run_never_beside_it(app: App, runs):
    args = {"dsn": app.dsn, "seconds": 1.0}
    first = await app.enqueue("pattern.step", {**args, "v": 0}, queue="q", lock_key="index:2", restartable=True)
    async with app.running(queues=[Queue("q", 4)]):
        await wait_until(lambda: runs.fetchval("SELECT count(*) FROM pattern_runs"), timeout=10)
        again = [await app.enqueue("pattern.step", {**args, "v": v}, queue="q", lock_key="index:2",
                                   restartable=True) for v in range(1, 6)]
        assert len({job.id for job in again}) == 1 and again[0].id != first.id
        await wait_until(lambda: runs.fetchval(
            "SELECT count(*) FROM pattern_runs WHERE ended_at IS NOT NULL"), timeout=20)
        await wait_until(lambda: runs.fetchval(
            "SELECT count(*) = 0 FROM dl_jobs WHERE status IN ('queued', 'running')"), timeout=20)

    rows = await runs.fetch("SELECT args->>'v' AS v, started_at, ended_at FROM pattern_runs ORDER BY id")
    assert [r["v"] for r in rows] == ["0", "5"], "exactly one more run, with the last trigger's args"
    assert rows[1]["started_at"] >= rows[0]["ended_at"], "the re-run overlapped the running one"
    assert await runs.fetchval("SELECT count(*) FROM dl_jobs") == 2


async def test_concurrent_triggers_leave_one_queued_job(app: App, runs):
    jobs = await asyncio.gather(*(app.enqueue("pattern.step", {"v": v}, queue="idle", lock_key="index:3",
                                              restartable=True) for v in range(20)))
    assert len({job.id for job in jobs}) == 1
    assert await runs.fetchval("SELECT count(*) FROM dl_jobs") == 1
    assert await runs.fetchval("SELECT count(*) FROM dl_job_events WHERE kind = 'retriggered'") == 19


async def test_a_trigger_naming_another_task_is_a_conflict_and_changes_nothing(app: App, runs):
    job = await app.enqueue("pattern.step", {"v": 1}, queue="idle", lock_key="index:4", restartable=True)
    with pytest.raises(RestartConflict, match=r"pattern\.step"):
        await app.enqueue("dl.noop", {"v": 2}, queue="idle", lock_key="index:4", restartable=True)
    assert (await app.get(job.id)).args == {"v": 1}


async def test_canceled_or_retried_jobs_never_block_or_conflict_with_the_next_trigger(app: App, runs):
    first = await app.enqueue("pattern.step", {"v": 1}, queue="idle", lock_key="index:5", restartable=True)
    await app.cancel(first.id)
    second = await app.enqueue("pattern.step", {"v": 2}, queue="idle", lock_key="index:5", restartable=True)
    assert second.id != first.id
    retried = await app.retry(first.id)  # back to queued as a plain job: no unique violation
    assert retried.status.value == "queued"
    third = await app.enqueue("pattern.step", {"v": 3}, queue="idle", lock_key="index:5", restartable=True)
    assert third.id == second.id and third.args == {"v": 3}


async def test_restartable_needs_a_lock_key_and_excludes_an_idempotency_key(app: App, runs):
    with pytest.raises(ValueError, match="needs a lock_key"):
        await app.enqueue("pattern.step", queue="idle", restartable=True)
    with pytest.raises(ValueError, match="exclude each other"):
        await app.enqueue("pattern.step", queue="idle", lock_key="k", restartable=True, idempotency_key="i")
    assert await runs.fetchval("SELECT count(*) FROM dl_jobs") == 0


async def test_http_restartable_trigger_answers_201_then_200_with_the_same_job(app: App, runs, dsn):
    service = create_app(settings_for(dsn), context=app)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=service), base_url="http://test") as client:
        body = {"queue": "idle", "task": "pattern.step", "lock_key": "index:6", "restartable": True, "args": {"v": 1}}
        first = await client.post("/api/v1/jobs/trigger", json=body)
        second = await client.post("/api/v1/jobs/trigger", json={**body, "args": {"v": 2}})
        conflict = await client.post("/api/v1/jobs/trigger", json={**body, "task": "dl.noop"})
        both = await client.post("/api/v1/jobs/trigger", json={**body, "idempotency_key": "x"})
    assert (first.status_code, second.status_code) == (201, 200)
    assert first.json()["job_id"] == second.json()["job_id"]
    assert conflict.status_code == 409 and conflict.json()["error"] == "restart_conflict"
    assert both.status_code == 422
    assert (await app.get(first.json()["job_id"])).args == {"v": 2}
