"""Promise 8: bad input gets a clear 4xx `{"error", "detail"}` and changes nothing."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

import pytest

from tests.api.v1.conftest import table_counts
from tests.api.v1.constants import MAX_ARGS_BYTES, TRIGGER, job_body

JSON = {"content-type": "application/json"}


def raw(body: object) -> bytes:
    """JSON as Python's encoder writes it: NaN allowed, surrogates escaped (unlike httpx's json=)."""
    return json.dumps(body).encode()


def nested(depth: int) -> dict:
    value: dict = {}
    for _ in range(depth):
        value = {"a": value}
    return value


BAD_BODIES: list[tuple[str, bytes, int, str]] = [
    # lock_key may be left out (it defaults to the job's id, as in Python and the CLI), but not by
    # a restartable job, whose key is what re-triggers it.
    ("restartable without lock_key", raw({"queue": "api", "task": "dl.noop", "restartable": True}), 422,
     "validation_error"),
    ("empty lock_key", raw(job_body(lock_key="")), 422, "validation_error"),
    ("blank lock_key", raw(job_body(lock_key="   ")), 422, "validation_error"),
    ("lock_key not a string", raw(job_body(lock_key=12)), 422, "validation_error"),
    ("missing queue", raw({"task": "dl.noop", "lock_key": "k"}), 422, "validation_error"),
    ("queue too long", raw(job_body(queue="q" * 201)), 422, "validation_error"),
    ("available_at without timezone", raw(job_body(available_at="2030-01-01T00:00:00")), 422,
     "validation_error"),
    ("available_at words", raw(job_body(available_at="tomorrow")), 422, "validation_error"),
    ("available_at epoch number", raw(job_body(available_at=1900000000)), 422, "validation_error"),
    ("available_at date only", raw(job_body(available_at="2030-01-01")), 422, "validation_error"),
    ("available_at without seconds", raw(job_body(available_at="2030-01-01T00:00Z")), 422,
     "validation_error"),
    ("available_at past datetime.max in UTC", raw(job_body(available_at="9999-12-31T23:00:00-05:00")), 422,
     "validation_error"),
    ("available_at bad offset", raw(job_body(available_at="2030-01-01T00:00:00+25:00")), 422,
     "validation_error"),
    ("negative priority", raw(job_body(priority=-1)), 422, "validation_error"),
    ("priority above int4", raw(job_body(priority=2**31)), 422, "validation_error"),
    ("priority fractional", raw(job_body(priority=1.5)), 422, "validation_error"),
    ("priority word", raw(job_body(priority="high")), 422, "validation_error"),
    ("priority as text", raw(job_body(priority="5")), 422, "validation_error"),  # numbers are strict everywhere
    ("max_attempts zero", raw(job_body(max_attempts=0)), 422, "validation_error"),
    ("lease_ttl_sec zero", raw(job_body(lease_ttl_sec=0)), 422, "validation_error"),
    ("args a list", raw(job_body(args=[1, 2])), 422, "validation_error"),
    ("args a string", raw(job_body(args="x=1")), 422, "validation_error"),
    ("args null", raw(job_body(args=None)), 422, "validation_error"),
    ("args NaN", raw(job_body(args={"x": float("nan")})), 422, "validation_error"),
    ("args Infinity", raw(job_body(args={"x": float("inf")})), 422, "validation_error"),
    ("args NUL", raw(job_body(args={"x": "a\x00b"})), 422, "validation_error"),
    ("args NUL in key", raw(job_body(args={"a\x00": 1})), 422, "validation_error"),
    ("args lone surrogate", raw(job_body(args={"x": "\ud800"})), 422, "validation_error"),
    ("args lone surrogate key", raw(job_body(args={"\udc00": 1})), 422, "validation_error"),
    ("lock_key lone surrogate", raw(job_body(lock_key="\ud800")), 422, "validation_error"),
    ("lock_key NUL", raw(job_body(lock_key="a\x00")), 422, "validation_error"),
    ("partition_key NUL", raw(job_body(partition_key="a\x00")), 422, "validation_error"),
    ("args too deep", raw(job_body(args=nested(80))), 422, "validation_error"),
    ("args over DL_MAX_ARGS_BYTES", raw(job_body(args={"blob": "x" * MAX_ARGS_BYTES})), 413, "args_too_large"),
    ("unknown field", raw({**job_body(), "colour": "red"}), 422, "validation_error"),
    ("unknown field typo", raw({**job_body(), "lockkey": "k"}), 422, "validation_error"),
    ("body a list", raw([job_body()]), 422, "validation_error"),
    ("body a string", raw("hello"), 422, "validation_error"),
    ("body null", b"null", 422, "validation_error"),
    ("empty body", b"", 422, "validation_error"),
    ("invalid JSON", b'{"queue": "api",', 400, "invalid_json"),
    ("trailing garbage", raw(job_body()) + b"}", 400, "invalid_json"),
    ("not UTF-8", b'{"queue": "\xff\xfe"}', 400, "invalid_json"),
    ("raw body over the limit", raw(job_body(args={"blob": "x" * (3 * MAX_ARGS_BYTES + 70_000)})), 413,
     "request_too_large"),
]


@pytest.mark.parametrize(("body", "status", "code"), [b[1:] for b in BAD_BODIES], ids=[b[0] for b in BAD_BODIES])
async def test_bad_trigger_body_is_refused_and_writes_nothing(client, db, body, status, code):
    before = await table_counts(db)
    response = await client.post(TRIGGER, content=body, headers=JSON)
    assert response.status_code == status, response.text
    error = response.json()
    assert error["error"] == code
    assert isinstance(error["detail"], str) and error["detail"]
    assert await table_counts(db) == before


async def test_unknown_task_for_a_served_queue_is_refused_and_lists_registered_tasks(worker_client, db):
    """This process runs workers for the queue and has no pipeline for the task: they would fail
    the job, so it is refused (the same rule as app.enqueue)."""
    before = await table_counts(db)
    response = await worker_client.post(TRIGGER, json=job_body(task="dl.slep"))
    assert response.status_code == 422
    assert response.json()["error"] == "unknown_task"
    assert "dl.sleep" in response.json()["detail"] and "dl.noop" in response.json()["detail"]
    assert await table_counts(db) == before


async def test_unknown_task_for_a_queue_served_elsewhere_is_accepted(worker_client, db):
    """No worker of this process serves the queue: a replica with the pipeline will run it, so a
    producer needs no pipeline code."""
    elsewhere = await worker_client.post(TRIGGER, json=job_body(queue="other-team", task="their.task"))
    assert elsewhere.status_code == 201 and elsewhere.json()["served"] is False


async def test_unknown_task_on_a_node_running_no_workers_is_accepted(client, db):
    api_only = await client.post(TRIGGER, json=job_body(task="their.task", lock_key="k2"))
    assert api_only.status_code == 201, "a node running no workers serves no queue"


async def test_validation_error_names_the_field(client, db):
    response = await client.post(TRIGGER, json=job_body(priority=-5))
    fields = response.json()["fields"]
    assert fields[0]["loc"] == ["body", "priority"]
    assert "priority" in response.json()["detail"]
    nan = await client.post(TRIGGER, content=raw(job_body(args={"x": float("nan")})), headers=JSON)
    assert nan.json()["fields"][0]["loc"] == ["body", "args"]
    assert nan.json()["fields"][0]["msg"] == "must not contain NaN or Infinity"


async def test_wrong_content_type_is_415(client, db):
    response = await client.post(TRIGGER, content=raw(job_body()), headers={"content-type": "text/plain"})
    assert response.status_code == 415 and response.json()["error"] == "unsupported_media_type"
    form = await client.post(TRIGGER, data={"queue": "api", "task": "dl.noop", "lock_key": "k"})
    assert form.status_code == 415
    assert await table_counts(db) == (0, 0)


async def test_chunked_body_over_the_limit_is_refused(client, db):
    async def chunks() -> AsyncIterator[bytes]:
        yield b'{"queue": "api", "task": "dl.noop", "lock_key": "k", "args": {"blob": "'
        for _ in range(100):
            yield b"x" * 1024
        yield b'"}}'

    response = await client.post(TRIGGER, content=chunks(), headers=JSON)
    assert response.status_code == 413 and response.json()["error"] == "request_too_large"
    assert await table_counts(db) == (0, 0)


async def test_chunked_body_within_the_limit_is_accepted(client, db):
    async def chunks() -> AsyncIterator[bytes]:
        yield b'{"queue": "api", "task": "dl.noop", '
        yield b'"lock_key": "k"}'

    response = await client.post(TRIGGER, content=chunks(), headers=JSON)
    assert response.status_code == 201, response.text


@pytest.mark.parametrize("job_id", ["nope", "123", "00000000-0000-0000-0000-00000000000g", "%00", "%ff",
                                    "' OR 1=1 --"])
@pytest.mark.parametrize(("method", "suffix"), [("GET", "status"), ("POST", "cancel"), ("GET", "events")])
async def test_malformed_job_id_is_422(client, db, job_id, method, suffix):
    before = await table_counts(db)
    response = await client.request(method, f"/api/v1/jobs/{job_id}/{suffix}")
    assert response.status_code == 422, response.text
    assert response.json()["error"] == "validation_error"
    assert await table_counts(db) == before


async def test_unknown_route_and_method_use_the_error_format(client, db):
    missing = await client.get("/api/v1/nothing-here")
    assert missing.status_code == 404 and missing.json()["error"] == "not_found"
    wrong_method = await client.get(TRIGGER)
    assert wrong_method.status_code == 405 and wrong_method.json()["error"] == "method_not_allowed"
