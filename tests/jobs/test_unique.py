"""Unique jobs for a period (issue 10): at most one job per task, queue and unique key (default:
the args) per window, kept by the database's unique index on a derived key."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import httpx

from dataloader import App
from dataloader.api import create_app
from tests.jobs.conftest import settings_for


async def test_a_repeat_in_the_window_returns_the_existing_job(app: App, runs):
    first = await app.enqueue("pattern.step", {"account": 1}, queue="idle", unique_for=timedelta(hours=1))
    again = await app.enqueue("pattern.step", {"account": 1}, queue="idle", unique_for=3600)
    other_args = await app.enqueue("pattern.step", {"account": 2}, queue="idle", unique_for=3600)
    other_queue = await app.enqueue("pattern.step", {"account": 1}, queue="idle2", unique_for=3600)
    assert again.id == first.id
    assert len({first.id, other_args.id, other_queue.id}) == 3
    # a unique_key makes jobs with different args the same
    keyed = await app.enqueue("pattern.step", {"at": 1}, queue="idle", unique_for=3600, unique_key="acct-9")
    keyed_again = await app.enqueue("pattern.step", {"at": 2}, queue="idle", unique_for=3600, unique_key="acct-9")
    assert keyed.id == keyed_again.id and keyed_again.args == {"at": 1}
    assert await runs.fetchval("SELECT count(*) FROM dl_jobs") == 4


async def test_a_finished_job_still_holds_its_window(app: App, runs):
    first = await app.enqueue("pattern.step", {"a": 1}, queue="idle", unique_for=3600)
    await app.cancel(first.id)
    again = await app.enqueue("pattern.step", {"a": 1}, queue="idle", unique_for=3600)
    assert again.id == first.id and again.status.value == "canceled"


async def test_concurrent_enqueues_make_one_job(app: App, runs):
    jobs = await asyncio.gather(*(app.enqueue("pattern.step", {"a": 1}, queue="idle", unique_for=600)
                                  for _ in range(20)))
    assert len({job.id for job in jobs}) == 1
    assert await runs.fetchval("SELECT count(*) FROM dl_jobs") == 1


async def test_http_unique_for_sec(app: App, runs, dsn):
    service = create_app(settings_for(dsn), context=app)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=service), base_url="http://test") as client:
        body = {"queue": "idle", "task": "pattern.step", "lock_key": "k", "unique_for_sec": 3600, "args": {"a": 1}}
        first = await client.post("/api/v1/jobs/trigger", json=body)
        second = await client.post("/api/v1/jobs/trigger", json=body)
        key_alone = await client.post("/api/v1/jobs/trigger", json={**body, "unique_for_sec": None,
                                                                    "unique_key": "u"})
        with_idem = await client.post("/api/v1/jobs/trigger", json={**body, "idempotency_key": "i"})
        zero = await client.post("/api/v1/jobs/trigger", json={**body, "unique_for_sec": 0})
    assert (first.status_code, second.status_code) == (201, 200)
    assert first.json()["job_id"] == second.json()["job_id"]
    assert {key_alone.status_code, with_idem.status_code, zero.status_code} == {422}
    assert await runs.fetchval("SELECT count(*) FROM dl_jobs") == 1
