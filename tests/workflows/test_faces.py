"""The workflow faces: HTTP under /api/v1/workflows (the house's error shape; bad input is a 4xx
that writes nothing) and the CLI (`dataloader workflows start|get|result|signal|cancel`: one line and
exit 2 on bad input), driving the same runs as Python."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator

import asyncpg
import httpx
import pytest

from dataloader import App
from dataloader.api import create_app
from tests.conftest import wait_until
from tests.support.cli import error_line, run
from tests.workflows.test_workflows import _waiting


@pytest.fixture
async def client(app: App) -> AsyncIterator[httpx.AsyncClient]:
    async with app.running(), httpx.AsyncClient(
            transport=httpx.ASGITransport(app=create_app(app.settings, context=app)), base_url="http://t") as c:
        yield c


async def test_http_start_get_signal_result_cancel(client: httpx.AsyncClient, wdb: asyncpg.Pool, dsn: str) -> None:
    started = await client.post("/api/v1/workflows", json={"workflow": "t.wait", "input": {"dsn": dsn, "timeout": 60},
                                                           "idempotency_key": "k-1"})
    assert started.status_code == 201, started.text
    run_id = started.json()["run_id"]
    assert started.headers["location"] == f"/api/v1/workflows/{run_id}"
    again = await client.post("/api/v1/workflows", json={"workflow": "t.wait", "input": {"dsn": dsn, "timeout": 60},
                                                         "idempotency_key": "k-1"})
    assert again.json()["run_id"] == run_id
    await wait_until(lambda: _waiting(wdb, uuid.UUID(run_id)), timeout=10, message="the run waits")
    got = (await client.get(f"/api/v1/workflows/{run_id}")).json()
    assert got["status"] == "queued" and [s["kind"] for s in got["steps"]] == ["step", "wait"]
    early = await client.get(f"/api/v1/workflows/{run_id}/result", params={"timeout_sec": 0.1})
    assert early.status_code == 504 and early.json()["error"] == "workflow_timeout"
    sent = await client.post(f"/api/v1/workflows/{run_id}/signals/go", json={"payload": {"ok": True}})
    assert sent.status_code == 202, sent.text
    result = await client.get(f"/api/v1/workflows/{run_id}/result", params={"timeout_sec": 20})
    assert result.status_code == 200 and result.json()["result"] == {"first": {"ok": True}, "second": None}
    late = await client.post(f"/api/v1/workflows/{run_id}/signals/go")
    assert late.status_code == 409 and late.json()["error"] == "workflow_finished"

    waiting = (await client.post("/api/v1/workflows", json={"workflow": "t.wait", "input": {"dsn": dsn}})).json()
    # a waiting run (its job queued) ends at once; one still running its first step would end at
    # its next await and answer "running" here
    await wait_until(lambda: _waiting(wdb, uuid.UUID(waiting["run_id"])), timeout=10, message="the run waits")
    canceled = await client.post(f"/api/v1/workflows/{waiting['run_id']}/cancel")
    assert canceled.status_code == 200 and canceled.json()["status"] == "canceled"
    failed = await client.get(f"/api/v1/workflows/{waiting['run_id']}/result")
    assert failed.status_code == 409 and failed.json()["error"] == "workflow_failed"
    restarted = await client.post(f"/api/v1/workflows/{waiting['run_id']}/restart", json={})
    assert restarted.status_code == 200 and restarted.json()["status"] in ("queued", "running"), restarted.text
    refused = await client.post(f"/api/v1/workflows/{run_id}/restart", json={"from_step": "started"})
    assert refused.status_code == 409 and refused.json()["error"] == "job_not_retryable"
    unknown = await client.post(f"/api/v1/workflows/{waiting['run_id']}/restart", json={"from_step": "zz"})
    assert unknown.status_code == 422 and unknown.json()["error"] == "validation_error"


async def test_http_bad_input_is_a_4xx_that_writes_nothing(client: httpx.AsyncClient, wdb: asyncpg.Pool) -> None:
    cases = [
        ("post", "/api/v1/workflows", {"workflow": "t.nope"}, 404, "unknown_workflow"),
        ("post", "/api/v1/workflows", {"workflow": "bad name"}, 422, "validation_error"),
        ("post", "/api/v1/workflows", {"workflow": "t.steps", "extra": 1}, 422, "validation_error"),
        ("post", "/api/v1/workflows", {"workflow": "t.steps", "input": "\u0000"}, 422, "validation_error"),
        ("get", f"/api/v1/workflows/{uuid.uuid4()}", None, 404, "workflow_not_found"),
        ("get", "/api/v1/workflows/not-a-uuid", None, 422, "validation_error"),
        ("post", f"/api/v1/workflows/{uuid.uuid4()}/signals/go", {"payload": 1}, 404, "workflow_not_found"),
        ("post", f"/api/v1/workflows/{uuid.uuid4()}/signals/bad%20name", {}, 422, "validation_error"),
        ("post", f"/api/v1/workflows/{uuid.uuid4()}/signals/go", {"nope": 1}, 422, "validation_error"),
        ("post", f"/api/v1/workflows/{uuid.uuid4()}/cancel", None, 404, "workflow_not_found"),
    ]
    for method, path, body, code, error in cases:
        answer = await client.request(method, path, json=body)
        assert (answer.status_code, answer.json()["error"]) == (code, error), (path, body, answer.text)
    assert await wdb.fetchval("SELECT count(*) FROM dl_workflow_runs") == 0
    assert await wdb.fetchval("SELECT count(*) FROM dl_workflow_signals") == 0


async def test_openapi_lists_the_routes_with_their_errors(client: httpx.AsyncClient) -> None:
    spec = (await client.get("/openapi.json")).json()
    signal = spec["paths"]["/api/v1/workflows/{run_id}/signals/{name}"]["post"]
    assert {"202", "404", "409", "422"} <= set(signal["responses"])
    assert "/api/v1/workflows/{run_id}/result" in spec["paths"]


async def test_cli_start_signal_result_and_bad_input(app: App, wdb: asyncpg.Pool, dsn: str,
                                                     cli_env: dict[str, str]) -> None:
    env = {**cli_env, "DL_PIPELINE_MODULES": "tests.workflows.flows"}
    started = run(["workflows", "start", "t.wait", "--input", json.dumps({"dsn": dsn, "timeout": 60})], env)
    assert started.returncode == 0, started.stderr
    run_id = json.loads(started.stdout)["run_id"]
    async with app.running():
        await wait_until(lambda: _waiting(wdb, uuid.UUID(run_id)), timeout=10, message="the run waits")
        sent = run(["workflows", "signal", run_id, "go", "--payload", '{"n": 1}'], env)
        assert sent.returncode == 0, sent.stderr
        assert json.loads(sent.stdout) == {"run_id": run_id, "signal": "go"}
        # in a thread: the command blocks, and this loop runs the workers that must end the run
        result = await asyncio.to_thread(run, ["workflows", "result", run_id, "--timeout", "20"], env)
        assert result.returncode == 0, result.stderr
        assert json.loads(result.stdout)["result"] == {"first": {"n": 1}, "second": None}
    got = run(["workflows", "get", run_id], env)
    assert json.loads(got.stdout)["status"] == "succeeded"
    for args, code in ((["workflows", "signal", run_id, "go", "--payload", "{nope"], 2),
                       (["workflows", "signal", "not-a-uuid", "go"], 2),
                       (["workflows", "signal", run_id, "bad name"], 2),
                       (["workflows", "start", "t.nope"], 1),
                       (["workflows", "signal", run_id, "go"], 1),  # it has ended
                       (["workflows", "get", str(uuid.uuid4())], 1),
                       (["workflows", "restart", run_id], 1)):  # it succeeded
        answer = run(args, env)
        assert answer.returncode == code, (args, answer.stdout, answer.stderr)
        lines = [line for line in answer.stderr.splitlines() if line.startswith("dataloader:")]
        assert len(lines) == 1 and "Traceback" not in answer.stderr, answer.stderr
    assert await wdb.fetchval("SELECT count(*) FROM dl_workflow_signals") == 1
    assert error_line  # the helper the other faces' tests use: the same one-line rule


def _sync_face(dsn: str) -> tuple[object, object]:
    from dataloader import SyncApp
    from tests.workflows.conftest import workflow_settings

    with SyncApp(workflow_settings(dsn)) as sync:
        run_id = sync.workflows.start("t.wait", {"dsn": dsn, "timeout": 60})
        sync.signal_workflow(run_id, "go", "sync")
        result = sync.workflows.result(run_id, timeout=20)
        return result, sync.workflows.get(run_id).status


async def test_sync_app_starts_signals_and_reads_a_run(app: App, wdb: asyncpg.Pool, dsn: str) -> None:
    async with app.running():  # the workers run on this loop; the SyncApp blocks in a thread
        result, status = await asyncio.to_thread(_sync_face, dsn)
    assert result == {"first": "sync", "second": None} and status == "succeeded"
