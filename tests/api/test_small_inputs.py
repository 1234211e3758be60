"""Inputs the fuzzing of issue 26 found accepted or answered oddly: each is now a clear 4xx (or the
right header) and changes nothing. (Process ones: tests/processes/test_request_edges.py.)"""

from __future__ import annotations

import asyncpg
import httpx
import pytest


async def test_prune_older_than_true_is_not_one_second(db: asyncpg.Pool, http: httpx.AsyncClient) -> None:
    await db.execute("INSERT INTO dl_jobs (job_id, queue, task, lock_key, status, finished_at) "
                     "VALUES (gen_random_uuid(), 'q', 't', 'k', 'succeeded', now() - interval '1 minute')")
    answer = await http.post("/api/v1/maintenance/prune", json={"older_than": True, "dry_run": False})
    assert answer.status_code == 422, answer.text
    assert await db.fetchval("SELECT count(*) FROM dl_jobs") == 1
    # numbers and durations still work
    counted = await http.post("/api/v1/maintenance/prune", json={"older_than": 30})
    assert counted.status_code == 200 and counted.json()["total"] == 1


@pytest.mark.parametrize("flag", [0, 1, "false", "true"])
async def test_an_operations_dry_run_must_be_true_or_false(db: asyncpg.Pool, http: httpx.AsyncClient,
                                                           flag: object) -> None:
    operations = await db.fetchval("SELECT count(*) FROM dl_operations")
    answer = await http.post("/api/v1/operations", json={"kind": "cancel", "filter": {"queues": ["q"]},
                                                          "dry_run": flag})
    assert answer.status_code == 422, answer.text
    assert await db.fetchval("SELECT count(*) FROM dl_operations") == operations
    search = await http.post("/api/v1/search", json={"count": flag})
    assert search.status_code == 422, search.text


async def test_a_405_allows_every_method_of_the_path(http: httpx.AsyncClient) -> None:
    answer = await http.patch("/api/v1/processes/ns/p1")
    assert answer.status_code == 405 and answer.json()["error"] == "method_not_allowed"
    assert {m.strip() for m in answer.headers["allow"].split(",")} >= {"GET", "PUT", "DELETE"}
    other = await http.put("/api/v1/schedules/s1")
    assert {m.strip() for m in other.headers["allow"].split(",")} >= {"GET", "DELETE"}


@pytest.mark.parametrize("tz", ["localtime", "posix/UTC", "right/UTC", "posixrules"])
async def test_a_schedule_needs_a_canonical_iana_zone(db: asyncpg.Pool, http: httpx.AsyncClient, tz: str) -> None:
    answer = await http.post("/api/v1/schedules", json={"name": "tz-check", "task": "dl.noop",
                                                         "cron": "0 * * * *", "tz": tz})
    assert answer.status_code == 422, answer.text
    assert (await http.get("/api/v1/schedules/tz-check")).status_code == 404


async def test_jobs_of_a_batch_carry_the_request_id(db: asyncpg.Pool, http: httpx.AsyncClient) -> None:
    for keyed in (False, True):  # the two statements of a batch: with idempotency keys and without
        jobs = [{"task": "dl.noop", "queue": "q", "lock_key": f"k{n}",
                 **({"idempotency_key": f"i{n}"} if keyed else {})} for n in range(2)]
        answer = await http.post("/api/v1/jobs/batch", json={"jobs": jobs},
                                 headers={"X-Request-ID": f"batch-{keyed}"})
        assert answer.status_code in (200, 201), answer.text
        ids = answer.json()["job_ids"]
        rows = await db.fetch("SELECT j.request_id, e.payload->>'request_id' AS journal FROM dl_jobs j "
                              "JOIN dl_job_events e USING (job_id) WHERE job_id = ANY($1::uuid[])", ids)
        assert len(rows) == 2 and {(r["request_id"], r["journal"]) for r in rows} == {(f"batch-{keyed}",) * 2}


async def test_a_number_with_5000_digits_is_a_422(db: asyncpg.Pool, http: httpx.AsyncClient) -> None:
    body = '{"task": "dl.noop", "queue": "q", "args": {"n": ' + "9" * 5000 + "}}"
    answer = await http.post("/api/v1/jobs/trigger", content=body, headers={"content-type": "application/json"})
    assert answer.status_code == 422, answer.text
    assert answer.json()["error"] == "validation_error" and "digits" in answer.json()["detail"]
    assert await db.fetchval("SELECT count(*) FROM dl_jobs") == 0
