"""The job's result over HTTP: the status endpoint returns what the pipeline returned (and null
before it succeeded), and the OpenAPI document describes the field."""

from __future__ import annotations

from tests.api.v1.constants import WORKER_QUEUE
from tests.conftest import wait_until


async def test_status_returns_the_result_of_a_succeeded_job(worker_client):
    value = {"rows": 3, "names": ["a", "ü"], "ok": True}
    resp = await worker_client.post("/api/v1/jobs/trigger", json={
        "queue": WORKER_QUEUE, "task": "test.outcome", "lock_key": "result-http",
        "args": {"action": "value", "value": value}})
    assert resp.status_code == 201, resp.text
    job_id = resp.json()["job_id"]

    async def succeeded():
        body = (await worker_client.get(f"/api/v1/jobs/{job_id}/status")).json()
        return body if body["status"] in ("succeeded", "failed") else None

    body = await wait_until(succeeded, timeout=10)
    assert (body["status"], body["result"], body["error"]) == ("succeeded", value, None)


async def test_status_of_a_queued_job_has_a_null_result(client):
    resp = await client.post("/api/v1/jobs/trigger", json={"queue": "nobody-serves-this", "task": "dl.noop",
                                                          "lock_key": "k"})
    body = (await client.get(f"/api/v1/jobs/{resp.json()['job_id']}/status")).json()
    assert body["status"] == "queued" and "result" in body and body["result"] is None


async def test_openapi_documents_the_result(client):
    schema = (await client.get("/openapi.json")).json()
    status = schema["components"]["schemas"]["JobStatusResponse"]["properties"]
    assert "result" in status and "returned" in status["result"]["description"]
