"""Wait tokens: a run hands a one-use secret to a third party, who completes it over HTTP without
the API's token; the run's wait_for(token) gets the payload. Every face, once."""

from __future__ import annotations

import json

import asyncpg
import httpx
import pytest

from dataloader import App, TokenNotFound, TokenUsed, WorkflowFinished
from dataloader.api import create_app
from dataloader.workflows.testing import WorkflowTest
from tests.conftest import wait_until
from tests.support.cli import run as cli
from tests.workflows.conftest import workflow_settings

API_TOKEN = "api-secret-for-tests"


async def _token_of(wdb: asyncpg.Pool, run_id) -> str:
    return await wait_until(lambda: wdb.fetchval("SELECT step_key FROM wf_probe WHERE run_id = $1 AND step = 'token'",
                                                 str(run_id)), timeout=20, message="the token to be handed out")



async def _suspended(app: App, run_id) -> bool:
    return (await app.workflows.get(run_id)).status == "queued"


async def test_a_third_party_completes_the_token_over_http_without_the_api_token(wdb: asyncpg.Pool, dsn: str):
    async with App(workflow_settings(dsn, api_token=API_TOKEN)) as app, app.running():
        transport = httpx.ASGITransport(app=create_app(app.settings, context=app))
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as outsider:
            run_id = await app.workflows.start("t.approval", {"dsn": dsn})
            token = await _token_of(wdb, run_id)
            assert (await outsider.get(f"/api/v1/workflows/{run_id}")).status_code == 401  # the rest needs it
            done = await outsider.post(f"/api/v1/workflows/tokens/{token}", json={"payload": {"approved": True}})
            assert done.status_code == 202, done.text
            assert done.json() == {"run_id": str(run_id)}
            again = await outsider.post(f"/api/v1/workflows/tokens/{token}", json={"payload": {"approved": False}})
            assert again.status_code == 409 and again.json()["error"] == "token_used"
            unknown = await outsider.post("/api/v1/workflows/tokens/not-a-token", json={})
            assert unknown.status_code == 404 and unknown.json()["error"] == "token_not_found"
            result = await app.workflows.result(run_id, timeout=30)
            assert result == {"answer": {"approved": True}, "same_token_on_replay": True}
            schema = (await outsider.get("/openapi.json")).json()
            assert "security" not in schema["paths"]["/api/v1/workflows/tokens/{token}"]["post"]
            assert schema["paths"]["/api/v1/workflows/{run_id}"]["get"]["security"] == [{"bearer": []}]
        # the token the third party got is the one recorded; one row per position, the first used
        recorded = await wdb.fetch("SELECT name, result FROM dl_workflow_steps WHERE run_id = $1 AND kind = 'token' "
                                   "ORDER BY seq", run_id)
        assert [r["name"] for r in recorded] == ["approval", "approval"] and recorded[0]["result"] == token
        used = await wdb.fetch("SELECT used_at IS NOT NULL AS used FROM dl_workflow_tokens WHERE run_id = $1 "
                               "ORDER BY seq", run_id)
        assert [u["used"] for u in used] == [True, False]


async def test_python_and_cli_faces_complete_once_and_an_ended_run_refuses(app: App, wdb: asyncpg.Pool, dsn: str,
                                                                            cli_env):
    async with app.running():
        first = await app.workflows.start("t.approval", {"dsn": dsn})
        token = await _token_of(wdb, first)
        assert await app.workflows.complete_token(token, "yes") == first
        with pytest.raises(TokenUsed):
            await app.workflows.complete_token(token, "again")
        with pytest.raises(TokenNotFound):
            await app.workflows.complete_token("x" * 500)
        assert (await app.workflows.result(first, timeout=30))["answer"] == "yes"

        second = await app.workflows.start("t.approval", {"dsn": dsn})
        other = await _token_of(wdb, second)
        made = cli(["workflows", "complete-token", other, "--payload", json.dumps({"by": "cli"})], cli_env)
        assert made.returncode == 0 and json.loads(made.stdout)["run_id"] == str(second), made.stderr
        used = cli(["workflows", "complete-token", other], cli_env)
        assert used.returncode == 1 and "token_used" in used.stderr and used.stderr.count("\n") <= 1, used.stderr
        bad = cli(["workflows", "complete-token", other, "--payload", "{oops"], cli_env)
        assert bad.returncode == 2 and "not JSON" in bad.stderr

        third = await app.workflows.start("t.approval", {"dsn": dsn})
        late = await _token_of(wdb, third)
        # the token is handed out just before the run suspends on it: a cancel of the still running
        # run ends it only at its next await, and a completion in between is stored (a loaded CI run)
        await wait_until(lambda: _suspended(app, third), timeout=20, message="the run to wait on its token")
        assert (await app.workflows.cancel(third)).status == "canceled"
        with pytest.raises(WorkflowFinished):
            await app.workflows.complete_token(late, "too late")
    signals = await wdb.fetchval("SELECT count(*) FROM dl_workflow_signals WHERE run_id = $1", third)
    assert signals == 0  # refused: nothing stored


async def test_a_token_times_out_like_any_wait(app: App, wdb: asyncpg.Pool, dsn: str):
    async with app.running():
        run_id = await app.workflows.start("t.approval", {"dsn": dsn, "timeout": 0.5})
        assert (await app.workflows.result(run_id, timeout=30))["answer"] is None


async def test_the_testing_harness_completes_tokens_in_memory(dsn: str, wdb: asyncpg.Pool):
    run = await WorkflowTest.start("t.approval", {"dsn": dsn})
    assert run.status == "waiting"
    [token] = list(run.memory.tokens)
    await run.complete_token(token, 42)
    assert run.status == "succeeded" and run.result == {"answer": 42, "same_token_on_replay": True}
    with pytest.raises(TokenUsed):
        await run.complete_token(token, 43)
