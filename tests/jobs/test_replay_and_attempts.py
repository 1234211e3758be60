"""Idempotent replay compares args as PostgreSQL stores them (jsonb equality), and the stored
max_attempts is the value that decides (a pipeline's override), in status, listings and replays."""

from __future__ import annotations

from dataloader.jobs.manager import JobRequest
from tests.conftest import wait_until
from tests.support.engine import job_row, job_service, running_engine

EXOTIC_ARGS = {"big": 1e300, "negzero": -0.0, "tiny": 5e-324, "nested": [1.0, 2.5e-10, {"x": 1e22}]}


async def test_replaying_exotic_floats_returns_the_same_job(db):
    service = job_service(db)
    req = JobRequest(queue="q", task="dl.noop", lock_key="k", idempotency_key="floats", args=EXOTIC_ARGS)
    first = await service.trigger(req)
    again = await service.trigger(req)
    assert first.created and not again.created
    assert again.job.id == first.job.id


async def test_replaying_exotic_floats_over_http_answers_200(db, http):
    body = {"queue": "q", "task": "dl.noop", "lock_key": "k", "idempotency_key": "floats-http", "args": EXOTIC_ARGS}
    first = await http.post("/api/v1/jobs/trigger", json=body)
    again = await http.post("/api/v1/jobs/trigger", json=body)
    assert (first.status_code, again.status_code) == (201, 200), again.text
    changed = await http.post("/api/v1/jobs/trigger", json={**body, "args": {**EXOTIC_ARGS, "big": 1e299}})
    assert changed.status_code == 409 and "args" in changed.json()["detail"]


async def test_the_pipelines_max_attempts_is_stored_and_a_replay_with_the_jobs_own_is_no_conflict(db):
    service = job_service(db)
    req = JobRequest(queue="q", task="test.flaky", lock_key="k", idempotency_key="att", max_attempts=7)
    first = await service.trigger(req)
    assert first.job.max_attempts == 3  # test.flaky overrides it to 3
    again = await service.trigger(req)
    assert not again.created


async def test_the_finish_stores_the_max_attempts_that_decided(dsn, db):
    # written by a producer that does not know the pipeline: the row says 5, test.flaky says 3
    job_id = await db.fetchval("INSERT INTO dl_jobs (job_id, queue, task, lock_key, args) VALUES "
                               "(gen_random_uuid(), 'default', 'test.flaky', 'k', '{\"succeed_on\": 99}') "
                               "RETURNING job_id")
    assert (await job_row(db, job_id))["max_attempts"] == 5
    async with running_engine(dsn, db):
        await wait_until(lambda: _attempted(db, job_id), timeout=15)
    assert (await job_row(db, job_id))["max_attempts"] == 3


async def _attempted(db, job_id):
    return (await job_row(db, job_id))["finished_at"] is not None or await db.fetchval(
        "SELECT count(*) FROM dl_job_events WHERE job_id=$1 AND kind='requeue'", job_id)
