"""API v1 (003 §5 and §11): trigger → status → cancel, idempotency, listing, the journal, and the
end-to-end path through real workers in this process."""

from __future__ import annotations

import uuid

import httpx

from dataloader.api.v1.models import QUEUE_NOT_SERVED, WARNING_HEADER
from tests.api.v1.conftest import table_counts
from tests.api.v1.constants import OTHER_QUEUE, TRIGGER, WORKER_QUEUE, job_body
from tests.conftest import wait_until


async def status_of(client: httpx.AsyncClient, job_id: str) -> dict:
    response = await client.get(f"/api/v1/jobs/{job_id}/status")
    assert response.status_code == 200, response.text
    return response.json()


async def kinds_of(client: httpx.AsyncClient, job_id: str) -> list[str]:
    response = await client.get(f"/api/v1/jobs/{job_id}/events", params={"limit": 1000})
    assert response.status_code == 200, response.text
    return [e["kind"] for e in response.json()["events"]]


async def test_trigger_status_cancel(client, db):
    response = await client.post(TRIGGER, json=job_body(task="dl.sleep", args={"seconds": 1}))
    assert response.status_code == 201, response.text
    body = response.json()
    assert body["status"] == "queued" and body["created"] is True
    job_id = body["job_id"]
    assert response.headers["location"] == f"/api/v1/jobs/{job_id}/status"

    status = await status_of(client, job_id)
    assert status == {"job_id": job_id, "status": "queued", "attempt": 0, "started_at": None,
                      "finished_at": None, "heartbeat_at": None, "error": None, "progress": {},
                      "result": None}

    response = await client.post(f"/api/v1/jobs/{job_id}/cancel")
    assert response.status_code == 200, response.text
    canceled = response.json()
    assert canceled["status"] == "canceled" and canceled["finished_at"] is not None
    assert (await status_of(client, job_id))["status"] == "canceled"
    assert await kinds_of(client, job_id) == ["queued", "canceled"]

    again = await client.post(f"/api/v1/jobs/{job_id}/cancel")
    assert again.status_code == 409
    assert again.json()["error"] == "job_already_finished"


async def test_unknown_job_is_404_everywhere(client, db):
    missing = uuid.uuid4()
    for method, path in (("GET", f"/api/v1/jobs/{missing}/status"), ("POST", f"/api/v1/jobs/{missing}/cancel"),
                         ("GET", f"/api/v1/jobs/{missing}/events")):
        response = await client.request(method, path)
        assert response.status_code == 404, (path, response.text)
        assert response.json()["error"] == "job_not_found"
    assert await table_counts(db) == (0, 0)


async def test_idempotency_same_body_returns_same_job(client, db):
    body = job_body(idempotency_key="load-2030-01-01", args={"day": "2030-01-01"}, priority=5,
                    available_at="2030-01-01T00:00:00Z")
    first = await client.post(TRIGGER, json=body)
    assert first.status_code == 201, first.text
    second = await client.post(TRIGGER, json=body)
    assert second.status_code == 200, second.text
    assert second.json()["job_id"] == first.json()["job_id"]
    assert second.json()["created"] is False
    # The same instant written with another offset is the same body.
    third = await client.post(TRIGGER, json={**body, "available_at": "2030-01-01T03:00:00+03:00"})
    assert third.status_code == 200 and third.json()["job_id"] == first.json()["job_id"]
    assert await table_counts(db) == (1, 1)


async def test_idempotency_different_body_is_409(client, db):
    body = job_body(idempotency_key="k-conflict", args={"n": 1})
    assert (await client.post(TRIGGER, json=body)).status_code == 201
    before = await table_counts(db)
    for changed in ({"args": {"n": 2}}, {"lock_key": "other"}, {"priority": 7}, {"task": "dl.sleep"}):
        response = await client.post(TRIGGER, json={**body, **changed})
        assert response.status_code == 409, (changed, response.text)
        error = response.json()
        assert error["error"] == "idempotency_conflict"
        assert next(iter(changed)) in error["detail"]
    assert await table_counts(db) == before


async def test_unserved_queue_is_accepted_with_a_warning(client, worker_client, db):
    unserved = await worker_client.post(TRIGGER, json=job_body(queue=OTHER_QUEUE))
    assert unserved.status_code == 201
    assert unserved.json()["served"] is False
    assert unserved.headers[WARNING_HEADER] == QUEUE_NOT_SERVED
    # The job waits for a replica that serves the queue: it is stored, not refused.
    assert (await status_of(worker_client, unserved.json()["job_id"]))["status"] == "queued"

    served = await worker_client.post(TRIGGER, json=job_body(queue=WORKER_QUEUE))
    assert served.status_code == 201 and served.json()["served"] is True
    assert WARNING_HEADER not in served.headers


async def test_request_id_reaches_the_journal(client, db):
    response = await client.post(TRIGGER, json=job_body(), headers={"X-Request-ID": "req-abc.123"})
    assert response.status_code == 201
    assert response.headers["x-request-id"] == "req-abc.123"
    job_id = response.json()["job_id"]
    events = (await client.get(f"/api/v1/jobs/{job_id}/events")).json()["events"]
    assert events[0]["kind"] == "queued"
    assert events[0]["payload"]["request_id"] == "req-abc.123"

    cancel = await client.post(f"/api/v1/jobs/{job_id}/cancel", headers={"X-Request-ID": "req-cancel"})
    assert cancel.status_code == 200
    events = (await client.get(f"/api/v1/jobs/{job_id}/events")).json()["events"]
    assert events[-1]["payload"]["request_id"] == "req-cancel"


async def test_request_id_is_generated_when_absent_or_unsafe(client, db):
    plain = await client.post(TRIGGER, json=job_body())
    generated = plain.headers["x-request-id"]
    assert len(generated) == 32
    unsafe = await client.post(TRIGGER, json=job_body(lock_key="k2"),
                               headers={"X-Request-ID": "bad id\twith spaces"})
    assert unsafe.headers["x-request-id"] not in ("bad id\twith spaces", generated)
    events = (await client.get(f"/api/v1/jobs/{unsafe.json()['job_id']}/events")).json()["events"]
    assert events[0]["payload"]["request_id"] == unsafe.headers["x-request-id"]


async def test_events_after_cursor(client, db):
    job_id = (await client.post(TRIGGER, json=job_body())).json()["job_id"]
    await client.post(f"/api/v1/jobs/{job_id}/cancel")
    page = (await client.get(f"/api/v1/jobs/{job_id}/events", params={"limit": 1})).json()
    assert [e["kind"] for e in page["events"]] == ["queued"] and page["has_more"] is True
    rest = (await client.get(f"/api/v1/jobs/{job_id}/events", params={"after": page["next_after"]})).json()
    assert [e["kind"] for e in rest["events"]] == ["canceled"] and rest["has_more"] is False
    empty = (await client.get(f"/api/v1/jobs/{job_id}/events", params={"after": rest["next_after"]})).json()
    assert empty["events"] == [] and empty["next_after"] == rest["next_after"]


async def test_list_jobs_filters_and_cursor(client, db):
    ids = []
    for i in range(7):
        task = "dl.sleep" if i % 2 else "dl.noop"
        response = await client.post(TRIGGER, json=job_body(task=task, lock_key=f"k{i}",
                                                            queue="list-a" if i < 5 else "list-b"))
        ids.append(response.json()["job_id"])
    await client.post(f"/api/v1/jobs/{ids[0]}/cancel")

    seen: list[str] = []
    cursor = None
    pages = 0
    while True:
        params = {"limit": 3, **({"cursor": cursor} if cursor else {})}
        page = (await client.get("/api/v1/jobs", params=params)).json()
        seen += [j["job_id"] for j in page["jobs"]]
        pages += 1
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert pages == 3
    assert seen == list(reversed(ids)), "newest first, every job once"

    by_queue = (await client.get("/api/v1/jobs", params={"queue": "list-b"})).json()["jobs"]
    assert {j["job_id"] for j in by_queue} == set(ids[5:])
    by_task = (await client.get("/api/v1/jobs", params={"task": "dl.sleep", "queue": "list-a"})).json()["jobs"]
    assert {j["job_id"] for j in by_task} == {ids[1], ids[3]}
    canceled = (await client.get("/api/v1/jobs", params={"status": "canceled"})).json()["jobs"]
    assert [j["job_id"] for j in canceled] == [ids[0]]
    both = (await client.get("/api/v1/jobs", params=[("status", "canceled"), ("status", "queued")])).json()
    assert len(both["jobs"]) == 7
    assert "args" not in both["jobs"][0]

    created = [j["created_at"] for j in both["jobs"]]
    window = (await client.get("/api/v1/jobs", params={"created_from": created[-1].replace("+00:00", "Z"),
                                                       "created_to": created[0]})).json()["jobs"]
    assert ids[-1] not in {j["job_id"] for j in window}
    future = (await client.get("/api/v1/jobs", params={"created_from": "2999-01-01T00:00:00Z"})).json()
    assert future == {"jobs": [], "next_cursor": None}


async def test_list_rejects_bad_parameters(client, db):
    for params in ({"limit": 0}, {"limit": 501}, {"status": "sleeping"}, {"cursor": "not-a-cursor"},
                   {"created_from": "2030-01-01T00:00:00"}, {"created_to": "yesterday"}, {"queue": ""}):
        response = await client.get("/api/v1/jobs", params=params)
        assert response.status_code == 422, (params, response.text)
        assert response.json()["error"] in ("validation_error", "invalid_cursor")


async def test_e2e_trigger_claim_heartbeat_done(worker_client, db):
    response = await worker_client.post(
        TRIGGER, json=job_body(task="dl.sleep", args={"seconds": 0.5, "chunks": 5}, lock_key="e2e"),
        headers={"X-Request-ID": "e2e-1"})
    assert response.status_code == 201 and response.json()["served"] is True
    job_id = response.json()["job_id"]

    async def finished():
        status = await status_of(worker_client, job_id)
        return status if status["status"] not in ("queued", "running") else None

    status = await wait_until(finished, timeout=15, message="job to finish")
    assert status["status"] == "succeeded", status
    assert status["attempt"] == 1 and status["error"] is None
    assert status["started_at"] and status["finished_at"] and status["heartbeat_at"]
    assert status["progress"] == {"chunks_done": 5, "chunks_total": 5}

    kinds = await kinds_of(worker_client, job_id)
    assert kinds[:2] == ["queued", "picked"] and kinds[-1] == "done", kinds
    assert "heartbeat" in kinds, kinds  # heartbeat every 0.1 s during a 0.5 s run
    events = (await worker_client.get(f"/api/v1/jobs/{job_id}/events")).json()["events"]
    assert events[0]["payload"]["request_id"] == "e2e-1"


async def test_e2e_cancel_running_job(worker_client, db, manager):
    job_id = (await worker_client.post(
        TRIGGER, json=job_body(task="dl.sleep", args={"seconds": 30, "chunks": 300}, lock_key="c"))).json()["job_id"]
    await wait_until(lambda: manager.running_jobs(), timeout=10, message="job to start")
    response = await worker_client.post(f"/api/v1/jobs/{job_id}/cancel")
    assert response.status_code == 200
    assert response.json()["status"] in ("running", "canceled")

    async def canceled():
        return (await status_of(worker_client, job_id))["status"] == "canceled"

    await wait_until(canceled, timeout=10, message="worker to stop the job")
    kinds = await kinds_of(worker_client, job_id)
    assert "cancel_requested" in kinds and kinds[-1] == "canceled", kinds


async def test_e2e_failed_job_reports_error(worker_client, db):
    job_id = (await worker_client.post(
        TRIGGER, json=job_body(task="dl.fail", args={"fatal": True, "message": "boom"}))).json()["job_id"]

    async def failed():
        return (await status_of(worker_client, job_id))["status"] == "failed"

    await wait_until(failed, timeout=10, message="job to fail")
    status = await status_of(worker_client, job_id)
    assert "boom" in status["error"] and status["finished_at"]
    assert (await kinds_of(worker_client, job_id))[-1] == "failed"
