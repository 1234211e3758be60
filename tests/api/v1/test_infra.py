"""/health, /status, /metrics, bearer auth, and the access log (003 §2, §7, §9, §10)."""

from __future__ import annotations

import io
import json
import logging
import socket
from collections.abc import AsyncIterator, Iterator

import pytest
from prometheus_client.parser import text_string_to_metric_families

from dataloader.api import create_app
from dataloader.app import App
from dataloader.jobs.manager import JobManager
from dataloader.logger.logger import JsonFormatter
from dataloader.storage import migrate
from dataloader.storage.db import create_pool
from dataloader.storage.repositories import JobRepository
from dataloader.workers.pipelines.registry import registry
from tests.api.v1.conftest import api_settings, client_for, table_counts
from tests.api.v1.constants import TRIGGER, WORKER_QUEUE, job_body
from tests.conftest import wait_until


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of a Prometheus text page, keyed by (name, sorted labels)."""
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def finished_count(page: dict, task: str, outcome: str) -> float:
    key = ("dl_jobs_finished_total", (("outcome", outcome), ("queue", WORKER_QUEUE), ("task", task)))
    return page.get(key, 0.0)


async def test_health_needs_no_database(client, db, app_ctx, monkeypatch):
    # What keeps /health cheap is that it never touches the database (speed itself is for bench/).
    def no_database(*args, **kwargs):
        raise AssertionError("/health used the database")

    monkeypatch.setattr(type(app_ctx.pool), "acquire", no_database)  # every asyncpg pool, while patched
    response = await client.get("/health")
    assert response.status_code == 200
    assert response.json()["status"] == "ok"


async def test_status_reports_database_queues_and_workers(worker_client, manager, db):
    await worker_client.post(TRIGGER, json=job_body(queue="status-q", available_at="2000-01-01T00:00:00Z"))
    # enqueued two hours ago (it waits from then, not from its available_at in 2000)
    await db.execute("UPDATE dl_jobs SET created_at = now() - interval '2 hours' WHERE queue = 'status-q'")
    await worker_client.post(TRIGGER, json=job_body(task="dl.sleep", args={"seconds": 30, "chunks": 300},
                                                    lock_key="status-run"))
    await wait_until(lambda: manager.running_jobs(), timeout=10, message="job to start")

    response = await worker_client.get("/status")
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["status"] == "ok"
    assert body["database"]["reachable"] is True
    assert body["database"]["schema_revision"] == migrate.head_revision()
    assert body["database"]["schema_current"] is True
    queues = {q["queue"]: q for q in body["queues"]}
    assert queues["status-q"]["counts"] == {"queued": 1}
    # runnable since its enqueue two hours ago: the later of available_at (2000) and created_at
    assert 2 * 3600 <= queues["status-q"]["oldest_runnable_age_sec"] < 3 * 3600
    assert queues[WORKER_QUEUE]["counts"]["running"] == 1
    assert body["workers"]["queues"] == [{"queue": WORKER_QUEUE, "concurrency": 2, "running": 1}]
    assert body["workers"]["running_jobs"][0]["task"] == "dl.sleep"


async def test_status_without_workers(client, db):
    body = (await client.get("/status")).json()
    assert body["workers"] is None and body["status"] == "ok"


async def test_metrics_parse_and_count_finished_jobs(worker_client, db):
    before = samples((await worker_client.get("/metrics")).text)
    job_id = (await worker_client.post(TRIGGER, json=job_body())).json()["job_id"]

    async def done():
        status = (await worker_client.get(f"/api/v1/jobs/{job_id}/status")).json()["status"]
        return status == "succeeded"

    await wait_until(done, timeout=10, message="dl.noop to succeed")
    response = await worker_client.get("/metrics")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    after = samples(response.text)
    assert finished_count(after, "dl.noop", "succeeded") == finished_count(before, "dl.noop", "succeeded") + 1
    assert after[("dl_queue_stats_up", ())] == 1
    route = "/api/v1/jobs/trigger"
    assert after[("dl_http_requests_total", (("method", "POST"), ("route", route), ("status", "201")))] >= 1
    for name in ("dl_claim_duration_seconds_count", "dl_job_run_duration_seconds_count",
                 "dl_finish_duration_seconds_count", "dl_job_queue_wait_seconds_count"):
        assert any(key[0] == name for key in after), name


async def test_metrics_report_queue_depth(client, db):
    for i in range(3):
        await client.post(TRIGGER, json=job_body(queue="depth-q", lock_key=f"d{i}",
                                                 available_at="2000-01-01T00:00:00Z"))
    await db.execute("UPDATE dl_jobs SET created_at = now() - interval '2 hours' WHERE lock_key = 'd0'")
    page = samples((await client.get("/metrics")).text)
    assert page[("dl_queue_jobs", (("queue", "depth-q"), ("status", "queued")))] == 3
    assert 2 * 3600 <= page[("dl_queue_oldest_runnable_age_seconds", (("queue", "depth-q"),))] < 3 * 3600


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(params=[None, "admin-s3cret"], ids=["open", "admin_token"])
async def dead_db_client(dsn: str, request: pytest.FixtureRequest) -> AsyncIterator:
    """An app whose database is a port nobody listens on; without DL_API_TOKEN, then with it (and
    the client sending it)."""
    dead = f"postgresql://nobody@127.0.0.1:{closed_port()}/nothing"
    settings = api_settings(dead, api_token=request.param)
    pool = await create_pool(dead, min_size=0, max_size=2)  # min_size=0: connects only when used
    repo = JobRepository(pool)
    # An App that opened fine and whose database then went away (open() itself would refuse).
    ctx = App(settings)
    ctx.db._dsn, ctx.db._pool = dead, pool
    ctx.repo = repo
    ctx.jobs = JobManager(repo, registry, default_lease_ttl_sec=60, max_args_bytes=1024)
    async with client_for(create_app(settings, context=ctx)) as c:
        if request.param:
            c.headers["Authorization"] = f"Bearer {request.param}"
        yield c
    await pool.close()


async def test_health_up_status_503_when_database_is_down(dead_db_client):
    health = await dead_db_client.get("/health")
    assert health.status_code == 200
    status = await dead_db_client.get("/status")
    assert status.status_code == 503
    assert status.json()["status"] == "unavailable"
    assert status.json()["database"]["reachable"] is False
    assert status.json()["database"]["error"]


async def test_api_is_503_not_500_when_database_is_down(dead_db_client):
    trigger = await dead_db_client.post(TRIGGER, json=job_body())
    assert trigger.status_code == 503, trigger.text
    assert trigger.json()["error"] == "database_unavailable"
    for path in ("/api/v1/jobs", "/api/v1/jobs/00000000-0000-0000-0000-000000000001/status"):
        response = await dead_db_client.get(path)
        assert response.status_code == 503 and response.json()["error"] == "database_unavailable", path
    bad = await dead_db_client.post(TRIGGER, json=job_body(lock_key=""))
    if "Authorization" in dead_db_client.headers:
        # With DL_API_TOKEN sent, bad input is still refused as bad input, without touching the database.
        assert bad.status_code == 422, bad.text
    else:
        # Without it the guard must ask the database whether an API token closes the API: it
        # fails closed (503), never open (docs/security.md "Tokens and scopes").
        assert bad.status_code == 503 and bad.json()["error"] == "database_unavailable", bad.text


async def test_metrics_scrape_survives_database_down(dead_db_client):
    response = await dead_db_client.get("/metrics")
    assert response.status_code == 200
    page = samples(response.text)
    assert page[("dl_queue_stats_up", ())] == 0
    assert not any(key[0] == "dl_queue_jobs" for key in page)


@pytest.fixture
async def token_client(db, app_ctx) -> AsyncIterator:
    settings = app_ctx.settings.model_copy(update={"api_token": "s3cret-tøken"})
    async with client_for(create_app(settings, context=app_ctx)) as c:
        yield c


@pytest.mark.parametrize("header", [None, "Bearer wrong", "bearer", "Basic czNjcmV0", "s3cret-tøken",
                                    "Bearer s3cret-tøken-and-more", "Bearer \u00ff\u00fe"])
async def test_auth_refuses_without_the_token(token_client, db, header):
    headers = {"Authorization": header.encode("utf-8")} if header else {}
    responses = [
        await token_client.post(TRIGGER, json=job_body(), headers=headers),
        # Refused before the body is read: an invalid body gets 401, not 400/422.
        await token_client.post(TRIGGER, content=b"{not json", headers=headers),
        await token_client.get("/api/v1/jobs", headers=headers),
        await token_client.get("/api/v1/jobs/00000000-0000-0000-0000-000000000001/status", headers=headers),
    ]
    for response in responses:
        assert response.status_code == 401, response.text
        assert response.json()["error"] == "unauthorized"
        assert response.headers["www-authenticate"] == "Bearer"
    assert await table_counts(db) == (0, 0)


async def test_auth_accepts_the_token_and_leaves_probes_open(token_client, db):
    good = {"Authorization": "Bearer s3cret-tøken".encode()}
    response = await token_client.post(TRIGGER, json=job_body(), headers=good)
    assert response.status_code == 201, response.text
    assert (await token_client.get("/api/v1/jobs", headers=good)).status_code == 200
    for path in ("/health", "/status", "/metrics"):
        assert (await token_client.get(path)).status_code == 200, path


async def test_auth_off_by_default(client, db):
    assert (await client.post(TRIGGER, json=job_body())).status_code == 201


@pytest.fixture
def json_log() -> Iterator[io.StringIO]:
    """Log lines as the service writes them (our JSON formatter), captured."""
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger()
    old_level = root.level
    root.addHandler(handler)
    root.setLevel(logging.INFO)
    yield stream
    root.removeHandler(handler)
    root.setLevel(old_level)


def lines(stream: io.StringIO) -> list[dict]:
    return [json.loads(line) for line in stream.getvalue().splitlines() if line.startswith("{")]


async def test_access_log_one_line_per_request_with_request_id(client, db, json_log):
    await client.post(TRIGGER, json=job_body(), headers={"X-Request-ID": "log-test-1"})
    await client.get("/api/v1/jobs", params={"limit": 5, "token": "hidden"}, headers={"X-Request-ID": "log-test-2"})
    access = [line for line in lines(json_log) if line["logger"] == "dataloader.access"]
    assert len(access) == 2
    first, second = access
    assert first["request_id"] == "log-test-1"
    assert (first["method"], first["path"], first["status"]) == ("POST", TRIGGER, 201)
    assert isinstance(first["duration_ms"], float)
    assert second["request_id"] == "log-test-2" and second["query"] == {"limit": "5", "token": "***"}
    enqueued = [line for line in lines(json_log) if line["message"] == "job enqueued"]
    assert enqueued[0]["request_id"] == "log-test-1"


async def test_logged_args_are_masked(client, db, json_log):
    args = {"password": "hunter2", "nested": {"api_key": "k-123", "rows": 5},
            "dsn": "postgresql://u:pw@db/x"}
    response = await client.post(TRIGGER, json=job_body(args=args))
    assert response.status_code == 201
    text = json_log.getvalue()
    assert "hunter2" not in text and "k-123" not in text and ":pw@" not in text
    enqueued = next(line for line in lines(json_log) if line["message"] == "job enqueued")
    assert enqueued["job_args"] == {"password": "***", "nested": {"api_key": "***", "rows": 5},
                                "dsn": "postgresql://u:***@db/x"}


async def test_unexpected_error_is_a_logged_500_json(client, db, json_log, monkeypatch):
    from dataloader.api.v1.service import JobResponses

    async def broken(self, job_id):
        raise RuntimeError("simulated bug")

    monkeypatch.setattr(JobResponses, "status", broken)
    response = await client.get("/api/v1/jobs/00000000-0000-0000-0000-000000000001/status",
                                headers={"X-Request-ID": "boom-1"})
    assert response.status_code == 500
    assert response.json()["error"] == "internal_error" and "boom-1" in response.json()["detail"]
    assert response.headers["x-request-id"] == "boom-1"
    logged = [line for line in lines(json_log) if line.get("exception")]
    assert logged and "simulated bug" in logged[0]["exception"] and logged[0]["request_id"] == "boom-1"


async def test_openapi_describes_every_endpoint_and_its_errors(client):
    spec = (await client.get("/openapi.json")).json()
    paths = spec["paths"]
    for path, method in (("/api/v1/jobs/trigger", "post"), ("/api/v1/jobs/{job_id}/status", "get"),
                         ("/api/v1/jobs/{job_id}/cancel", "post"), ("/api/v1/jobs", "get"),
                         ("/api/v1/jobs/{job_id}/events", "get"), ("/health", "get"),
                         ("/status", "get"), ("/metrics", "get")):
        assert method in paths[path], path
    trigger = paths["/api/v1/jobs/trigger"]["post"]
    # 401 only with DL_API_TOKEN set (test_http_surface.py); this app has none.
    assert {"200", "201", "400", "409", "413", "422", "503"} <= set(trigger["responses"])
    assert trigger["responses"]["409"]["content"]["application/json"]["schema"]["$ref"].endswith("ErrorResponse")
    assert "409" in paths["/api/v1/jobs/{job_id}/cancel"]["post"]["responses"]
    assert "description" in spec["components"]["schemas"]["TriggerResponse"]["properties"]["served"]
    assert (await client.get("/docs")).status_code == 200
