"""The schedules faces: HTTP (`/api/v1/schedules`: create, list with next runs, get, pause, resume,
history, delete; bad input is a 422 that writes nothing; errors have the jobs API's shape; the
OpenAPI schema documents it) and the CLI (`dataloader schedules list|pause|resume|delete|history`)."""

from __future__ import annotations

import inspect
import json
import subprocess
import sys

import httpx
import pytest

from dataloader.api import create_app
from dataloader.app import App
from dataloader.config import Settings
from dataloader.schedules.manager import ScheduleManager
from tests.support.cli import run

# The one default for how many upcoming run times a schedule shows (docs/patterns.md: "the next 5");
# both faces' tests compare with it, so a face that picks its own count fails its test.
UPCOMING_DEFAULT = inspect.signature(ScheduleManager.upcoming).parameters["count"].default


@pytest.fixture
async def client(sdb, dsn):
    app = await App(Settings(db_dsn=dsn)).open()
    try:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=create_app(app.settings, context=app)),
                                     base_url="http://t") as c:
            yield c
    finally:
        await app.close()


GOOD = {"name": "report.daily", "task": "dl.noop", "cron": "30 2 * * *", "tz": "Europe/Berlin",
        "args": {"kind": "daily"}, "queue": "reports"}


async def test_create_list_get_pause_resume_history_delete(client, sdb):
    created = await client.post("/api/v1/schedules", json=GOOD)
    assert created.status_code == 201, created.text
    body = created.json()
    assert body["source"] == "api" and body["upcoming"][0] == body["next_run_at"]
    assert len(body["upcoming"]) == UPCOMING_DEFAULT == 5
    again = await client.post("/api/v1/schedules", json=GOOD)
    assert again.status_code == 409 and again.json()["error"] == "schedule_exists"
    listed = (await client.get("/api/v1/schedules")).json()["schedules"]
    assert [s["name"] for s in listed] == ["report.daily"]
    paused = (await client.post("/api/v1/schedules/report.daily/pause")).json()
    assert paused["paused"] is True and paused["upcoming"] == []
    resumed = (await client.post("/api/v1/schedules/report.daily/resume")).json()
    assert resumed["paused"] is False
    history = await client.get("/api/v1/schedules/report.daily/history")
    assert history.status_code == 200 and history.json() == {"name": "report.daily", "runs": []}
    assert (await client.delete("/api/v1/schedules/report.daily")).status_code == 204
    missing = await client.get("/api/v1/schedules/report.daily")
    assert missing.status_code == 404 and missing.json()["error"] == "schedule_not_found"
    assert (await client.post("/api/v1/schedules/nope/pause")).status_code == 404


@pytest.mark.parametrize("change", [
    {"cron": "61 * * * *"},
    {"cron": "0 0 30 2 *"},
    {"tz": "Mars/Olympus"},
    {"tz": "Europe/Berlin\u0000"},
    {"name": "bad\u0000name"},
    {"name": "has space"},
    {"task": "a\u0000"},
    {"args": {"x": "nul\u0000"}},
    {"cron": None},
    {"every_sec": 5},
    {"cron": None, "every_sec": 1e308},
    {"cron": None, "every_sec": 0.5},
    {"priority": 2**63},
    {"catch_up_limit": 10**12},
    {"max_attempts": -1},
    {"missed": "sometimes"},
    {"unknown_field": 1},
])
async def test_bad_input_is_a_422_that_writes_nothing(client, sdb, change):
    body = {**GOOD, **change}
    response = await client.post("/api/v1/schedules", json=body)
    assert response.status_code == 422, response.text
    assert set(response.json()) >= {"error", "detail"} and response.json()["error"] == "validation_error"
    assert await sdb.fetchval("SELECT count(*) FROM dl_schedules") == 0


async def test_bad_names_in_paths_and_queries_are_4xx(client, sdb):
    assert (await client.get("/api/v1/schedules/a%00b")).status_code == 422
    assert (await client.get("/api/v1/schedules/x/history?limit=100000")).status_code == 422
    assert (await client.get("/api/v1/schedules/x/history?before=yesterday")).status_code == 422


async def test_openapi_documents_the_schedules_api(client):
    paths = (await client.get("/openapi.json")).json()["paths"]
    assert {"/api/v1/schedules", "/api/v1/schedules/{name}", "/api/v1/schedules/{name}/pause",
            "/api/v1/schedules/{name}/resume", "/api/v1/schedules/{name}/history"} <= set(paths)
    assert "409" in paths["/api/v1/schedules"]["post"]["responses"]
    assert "422" in paths["/api/v1/schedules"]["post"]["responses"]


def cli(subprocess_env, *args: str, process: bool = False) -> subprocess.CompletedProcess[str]:
    """`dataloader schedules <args>` in-process; `process`: a real `python -m dataloader` (the group's one)."""
    if not process:
        return run(["schedules", *args], subprocess_env)
    return subprocess.run([sys.executable, "-m", "dataloader", "schedules", *args], env=subprocess_env,
                          capture_output=True, text=True, timeout=60)


async def test_the_group_runs_as_a_real_process(sdb, subprocess_env):
    """The group's one real `python -m dataloader schedules` (the other CLI tests run in-process)."""
    made = cli(subprocess_env, "create", "--name", "cli.every", "--task", "dl.noop", "--every", "60", process=True)
    assert made.returncode == 0, made.stderr
    assert json.loads(made.stdout)["every_sec"] == 60
    await sdb.execute("DELETE FROM dl_schedules WHERE name = 'cli.every'")  # no later scheduler runs it


async def test_cli_create_list_pause_resume_history_delete(sdb, cli_env):
    made = cli(cli_env, "create", "--name", "cli.every", "--task", "dl.noop", "--every", "60")
    assert made.returncode == 0, made.stderr
    assert json.loads(made.stdout)["every_sec"] == 60
    listed = json.loads(cli(cli_env, "list").stdout)
    assert [s["name"] for s in listed] == ["cli.every"] and len(listed[0]["upcoming"]) == UPCOMING_DEFAULT
    assert json.loads(cli(cli_env, "pause", "cli.every").stdout)["paused"] is True
    assert json.loads(cli(cli_env, "resume", "cli.every").stdout)["paused"] is False
    assert json.loads(cli(cli_env, "history", "cli.every").stdout) == []
    assert json.loads(cli(cli_env, "delete", "cli.every").stdout) == {"deleted": "cli.every"}
    gone = cli(cli_env, "pause", "cli.every")
    assert gone.returncode == 1 and "schedule_not_found" in gone.stderr
    bad = cli(cli_env, "create", "--name", "x", "--task", "dl.noop", "--cron", "61 * * * *")
    assert bad.returncode == 2 and "invalid cron" in bad.stderr
    assert await sdb.fetchval("SELECT count(*) FROM dl_schedules") == 0
