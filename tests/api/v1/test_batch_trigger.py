"""`POST /api/v1/jobs/batch`: up to 1000 trigger bodies, checked first and inserted by one statement."""

from __future__ import annotations

import httpx
import pytest

from dataloader import App, Queue, Settings
from dataloader.api import create_app


@pytest.fixture
async def client(db, dsn):
    settings = Settings(db_dsn=dsn, workers=[Queue("q", 1)])
    async with App(settings) as app:
        service = create_app(settings, context=app)
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=service), base_url="http://test") as c:
            yield c


def job(n: int, **extra):
    return {"queue": "q", "task": "dl.noop", "lock_key": f"k{n}", "args": {"n": n}, **extra}


async def test_a_batch_inserts_every_job_in_order_and_skips_known_keys(client, db):
    first = await client.post("/api/v1/jobs/batch", json={"jobs": [job(i) for i in range(500)]})
    assert first.status_code == 201, first.text
    body = first.json()
    assert (body["inserted"], body["skipped"], len(body["job_ids"])) == (500, 0, 500)
    rows = await db.fetch("SELECT job_id, args FROM dl_jobs")
    by_id = {str(r["job_id"]): r["args"]["n"] for r in rows}
    assert [by_id[i] for i in body["job_ids"]] == list(range(500))
    assert await db.fetchval("SELECT count(*) FROM dl_job_events WHERE kind = 'queued'") == 500

    keyed = [job(1000, idempotency_key="same"), job(1001, idempotency_key="same"), job(1002, unique_for_sec=60),
             job(1002, unique_for_sec=60)]
    again = (await client.post("/api/v1/jobs/batch", json={"jobs": keyed})).json()
    assert (again["inserted"], again["skipped"]) == (2, 2)


@pytest.mark.parametrize("jobs", [
    [],
    [job(i) for i in range(1001)],
    [job(1), {**job(2), "task": ""}],
    [job(1), {**job(2), "args": {"a": "\x00"}}],
    [job(1), {**job(2), "restartable": True}],
    [job(1), {**job(2), "then": [{"task": "dl.noop"}]}],
    [job(1), {**job(2), "oops": 1}],
])
async def test_bad_input_anywhere_in_the_batch_writes_nothing(client, db, jobs):
    response = await client.post("/api/v1/jobs/batch", json={"jobs": jobs})
    assert response.status_code == 422, response.text
    assert await db.fetchval("SELECT count(*) FROM dl_jobs") == 0


async def test_a_batch_larger_than_the_body_limit_is_413(client, db):
    big = [job(i, args={"pad": "x" * 4000}) for i in range(200)]  # ~800 KB > 2 x 256 KiB + 64 KiB
    response = await client.post("/api/v1/jobs/batch", json={"jobs": big})
    assert response.status_code == 413 and response.json()["error"] == "request_too_large"
    assert await db.fetchval("SELECT count(*) FROM dl_jobs") == 0
