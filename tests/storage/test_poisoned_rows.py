"""No single row breaks a node: rows holding any value the 003 schema allows (written by another
producer sharing dl_jobs, or by hand) must not take down readiness, metrics, listings, the claim
loop or the next-due timer. Each test writes the odd row with SQL, as such a producer would."""

from __future__ import annotations

import logging
import uuid

import pytest

from dataloader.jobs.reaper import Reaper
from dataloader.storage.queue_connection import QueueConnection
from dataloader.storage.repositories import JobRepository
from tests.conftest import wait_until
from tests.support.engine import enqueue, job_row, running_engine

ODD_QUEUED_ROWS = [
    # (available_at, created_at, attempt, progress)
    ("'-infinity'", "now()", 0, "'{}'"),
    ("'infinity'", "now()", 0, "'{}'"),
    ("'20000-01-01'", "now()", 0, "'{}'"),
    ("'4000-01-01 BC'", "now()", 0, "'[1, 2]'"),
    ("now()", "'infinity'", 0, "'\"text\"'"),
    ("now()", "'-infinity'", 2147483647, "'null'"),
]


async def _insert_odd_rows(db, queue: str) -> list[uuid.UUID]:
    ids = []
    for available_at, created_at, attempt, progress in ODD_QUEUED_ROWS:
        job_id = uuid.uuid4()
        await db.execute(
            "INSERT INTO dl_jobs (job_id, queue, task, lock_key, available_at, created_at, attempt, max_attempts, "
            f"progress) VALUES ($1, $2, 'dl.noop', $3, {available_at}, {created_at}, {attempt}, 2147483647, "
            f"{progress})",
            job_id, queue, f"odd-{job_id}")
        await db.execute("INSERT INTO dl_job_events (job_id, queue, kind, payload) VALUES ($1, $2, 'queued', "
                         "'[\"not\", \"an\", \"object\"]')", job_id, queue)
        ids.append(job_id)
    return ids


async def test_status_metrics_list_and_job_reads_survive_odd_rows(db, http):
    ids = await _insert_odd_rows(db, "poison")
    status = await http.get("/status")
    assert status.status_code == 200, status.text
    queue = next(q for q in status.json()["queues"] if q["queue"] == "poison")
    assert queue["counts"]["queued"] == len(ids)
    assert 0 <= queue["oldest_runnable_age_sec"] < 3600 * 24 * 365 * 100
    metrics = await http.get("/metrics")
    assert "dl_queue_stats_up 1.0" in metrics.text
    assert 'dl_queue_jobs{queue="poison",status="queued"}' in metrics.text
    assert 'dl_queue_oldest_runnable_age_seconds{queue="poison"}' in metrics.text
    listing = await http.get("/api/v1/jobs", params={"queue": "poison", "limit": 2})
    assert listing.status_code == 200, listing.text
    seen = len(listing.json()["jobs"])
    cursor = listing.json()["next_cursor"]
    while cursor:
        page = await http.get("/api/v1/jobs", params={"queue": "poison", "limit": 2, "cursor": cursor})
        assert page.status_code == 200, page.text
        seen += len(page.json()["jobs"])
        cursor = page.json()["next_cursor"]
    assert seen == len(ids)
    for job_id in ids:
        for path in ("status", "events"):
            response = await http.get(f"/api/v1/jobs/{job_id}/{path}")
            assert response.status_code == 200, (path, response.text)


async def test_the_claim_loop_and_timer_keep_working_beside_odd_rows(dsn, db, caplog):
    ids = await _insert_odd_rows(db, "poison")
    caplog.set_level(logging.WARNING, logger="dataloader")
    async with running_engine(dsn, db, queues={"poison": 2}):
        normal = await enqueue(db, "dl.noop", queue="poison")
        await wait_until(lambda: _status_is(db, normal, "succeeded"), timeout=20)
        runnable = [ids[0], ids[3], ids[4], ids[5]]  # available_at in the past
        for job_id in runnable:
            await wait_until(lambda j=job_id: _status_is(db, j, "succeeded"), timeout=20)
        conn = await db.acquire()
        try:
            due_in = await QueueConnection(conn).next_due_in("poison")
        finally:
            await db.release(conn)
    assert due_in == 86400  # capped, not an "interval out of range" error
    assert (await job_row(db, ids[5]))["attempt"] == 2147483647  # capped, no overflow
    assert (await job_row(db, ids[1]))["status"] == "queued"  # 'infinity' never becomes due
    failures = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert not failures, failures


async def _status_is(db, job_id, status):
    return (await job_row(db, job_id))["status"] == status


async def test_a_running_row_without_a_lease_is_reaped(db):
    job_id = uuid.uuid4()
    await db.execute("INSERT INTO dl_jobs (job_id, queue, task, lock_key, status, attempt, lease_ttl_sec, "
                     "heartbeat_at) VALUES ($1, 'poison', 'dl.noop', 'k', 'running', 1, 5, "
                     "now() - interval '1 minute')", job_id)
    fresh = uuid.uuid4()  # no lease either, but alive within its lease's time: not reaped yet
    await db.execute("INSERT INTO dl_jobs (job_id, queue, task, lock_key, status, attempt, lease_ttl_sec, "
                     "heartbeat_at) VALUES ($1, 'poison', 'dl.noop', 'k2', 'running', 1, 600, now())", fresh)
    assert await Reaper(JobRepository(db), period=1).tick() == 1
    assert (await job_row(db, job_id))["status"] == "queued"
    assert (await job_row(db, fresh))["status"] == "running"


@pytest.mark.parametrize("task", ["test.huge_backoff", "test.nan_backoff"])
async def test_a_backoff_asking_for_an_impossible_delay_does_not_break_the_finish(dsn, db, task):
    async with running_engine(dsn, db, queues={"poison": 2}):
        job_id = await enqueue(db, task, queue="poison")
        other = await enqueue(db, "dl.noop", queue="poison")
        await wait_until(lambda: _has_requeue(db, job_id), timeout=20)
        await wait_until(lambda: _status_is(db, other, "succeeded"), timeout=20)
    delay = await db.fetchval("SELECT extract(epoch FROM available_at - now()) FROM dl_jobs WHERE job_id=$1", job_id)
    if task == "test.huge_backoff":
        assert 364 * 86400 < delay <= 365 * 86400  # clamped to a year
    else:
        assert 0 < delay <= 30  # NaN: the default backoff (30 s for attempt 1)


async def _has_requeue(db, job_id):
    return await db.fetchval("SELECT count(*) FROM dl_job_events WHERE job_id=$1 AND kind='requeue'", job_id)


@pytest.mark.parametrize("available_at", ["0001-01-01T00:00:00Z", "9999-12-31T23:59:59.999999Z",
                                          "9999-12-31T23:00:00-05:00", "1969-12-31T23:59:59Z"])
async def test_http_refuses_times_outside_the_range_and_writes_nothing(db, http, available_at):
    response = await http.post("/api/v1/jobs/trigger", json={
        "queue": "poison", "task": "dl.noop", "lock_key": "k", "available_at": available_at})
    assert response.status_code == 422, response.text
    detail = response.json()["detail"]
    assert detail.startswith("available_at: ")
    assert "must be between 1970-01-01T00:00:00Z and 9999-01-01T00:00:00Z" in detail or "out of range" in detail
    assert await db.fetchval("SELECT count(*) FROM dl_jobs") == 0
