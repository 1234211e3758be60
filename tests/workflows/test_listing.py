"""Listing runs (`app.workflows.list`, GET /api/v1/workflows, `dataloader workflows list`,
`SyncApp.workflows.list`): newest first, filtered by workflow and status, keyset-paged so that
runs started between two pages neither repeat nor hide a run; bad input is refused by the
manager's one check and writes nothing. Runs are started without workers, so they stay queued
until a test cancels one."""

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
from dataloader.exceptions import InvalidCursor, ValidationFailed
from dataloader.workflows.manager import RUN_STATUSES
from tests.support.cli import invoke


async def start_runs(app: App, workflow: str, count: int) -> list[uuid.UUID]:
    return [await app.workflows.start(workflow, {"dsn": "unused", "i": i}) for i in range(count)]


async def walk(app: App, limit: int, **filters: object) -> list[uuid.UUID]:
    """Every run the listing gives, page after page."""
    seen: list[uuid.UUID] = []
    cursor = None
    while True:
        page = await app.workflows.list(limit=limit, cursor=cursor, **filters)  # type: ignore[arg-type]
        assert len(page.runs) <= limit
        seen += [r.run_id for r in page.runs]
        if page.next_cursor is None:
            return seen
        cursor = page.next_cursor


async def test_runs_are_listed_newest_first_and_filtered_by_workflow_and_status(app: App, wdb: asyncpg.Pool) -> None:
    steps = await start_runs(app, "t.steps", 3)
    waits = await start_runs(app, "t.wait", 2)
    await app.workflows.cancel(steps[1])

    everything = await app.workflows.list()
    assert [r.run_id for r in everything.runs] == [*reversed(waits), *reversed(steps)]
    assert everything.next_cursor is None
    first = everything.runs[-1]
    assert (first.workflow, first.status, first.queue, first.parent_run_id) == ("t.steps", "queued", "wf", None)
    assert first.created_at is not None and first.finished_at is None
    assert set(first.to_dict()) >= {"run_id", "workflow", "status", "queue", "created_at", "started_at",
                                    "finished_at", "error"}
    assert "steps" not in first.to_dict() and "input" not in first.to_dict(), "a listing carries no history"

    only_steps = await app.workflows.list(workflow="t.steps")
    assert [r.run_id for r in only_steps.runs] == list(reversed(steps))
    canceled = await app.workflows.list(status="canceled")
    assert [(r.run_id, r.status) for r in canceled.runs] == [(steps[1], "canceled")]
    assert canceled.runs[0].finished_at is not None
    queued_waits = await app.workflows.list(workflow="t.wait", status="queued")
    assert [r.run_id for r in queued_waits.runs] == list(reversed(waits))
    assert (await app.workflows.list(workflow="t.nobody")).runs == []


async def test_pages_neither_repeat_nor_skip_a_run_when_runs_start_between_them(app: App, wdb: asyncpg.Pool) -> None:
    older = await start_runs(app, "t.steps", 5)
    first = await app.workflows.list(limit=2)
    assert [r.run_id for r in first.runs] == [older[4], older[3]] and first.next_cursor
    newer = await start_runs(app, "t.steps", 3)  # started between two pages: they go before page one
    rest: list[uuid.UUID] = []
    cursor = first.next_cursor
    while cursor:
        page = await app.workflows.list(limit=2, cursor=cursor)
        rest += [r.run_id for r in page.runs]
        cursor = page.next_cursor
    assert rest == [older[2], older[1], older[0]], "the cursor is a position: the new runs shift nothing"
    assert await walk(app, 3) == [*reversed(newer), *reversed(older)]
    assert await walk(app, 1, workflow="t.steps", status="queued") == [*reversed(newer), *reversed(older)]


@pytest.mark.parametrize(("filters", "where"), [
    ({"status": "sleeping"}, "status"),
    ({"status": ""}, "status"),
    ({"limit": 0}, "limit"),
    ({"limit": 501}, "limit"),
    ({"limit": True}, "limit"),
    ({"limit": "10"}, "limit"),
    ({"workflow": "bad name"}, "workflow"),
    ({"workflow": ""}, "workflow"),
])
async def test_bad_filters_are_a_validation_error_naming_the_field(app: App, wdb: asyncpg.Pool, filters: dict,
                                                                   where: str) -> None:
    with pytest.raises(ValidationFailed) as caught:
        await app.workflows.list(**filters)
    assert caught.value.fields[0]["loc"] == [where]
    assert await wdb.fetchval("SELECT count(*) FROM dl_workflow_runs") == 0


async def test_a_cursor_not_from_the_listing_is_refused(app: App, wdb: asyncpg.Pool) -> None:
    with pytest.raises(InvalidCursor):
        await app.workflows.list(cursor="not-a-cursor")


@pytest.fixture
async def client(app: App) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=create_app(app.settings, context=app)),
                                 base_url="http://t") as c:
        yield c


async def test_http_lists_pages_and_refuses_bad_filters(client: httpx.AsyncClient, app: App,
                                                        wdb: asyncpg.Pool) -> None:
    runs = await start_runs(app, "t.steps", 3)
    first = await client.get("/api/v1/workflows", params={"workflow": "t.steps", "limit": 2})
    assert first.status_code == 200, first.text
    body = first.json()
    assert [r["run_id"] for r in body["runs"]] == [str(runs[2]), str(runs[1])]
    assert body["runs"][0]["status"] == "queued" and body["runs"][0]["workflow"] == "t.steps"
    second = (await client.get("/api/v1/workflows", params={"cursor": body["next_cursor"], "limit": 2})).json()
    assert [r["run_id"] for r in second["runs"]] == [str(runs[0])] and second["next_cursor"] is None
    default = (await client.get("/api/v1/workflows")).json()
    assert len(default["runs"]) == 3, "the manager's default limit (50) covers them"
    for params, code in (({"status": "sleeping"}, "validation_error"), ({"limit": 0}, "validation_error"),
                         ({"limit": 501}, "validation_error"), ({"workflow": "bad name"}, "validation_error"),
                         ({"cursor": "bm90LWEtY3Vyc29y"}, "invalid_cursor")):
        answer = await client.get("/api/v1/workflows", params=params)
        assert (answer.status_code, answer.json()["error"]) == (422, code), (params, answer.text)


async def test_openapi_documents_the_listing_with_the_managers_statuses(client: httpx.AsyncClient) -> None:
    spec = (await client.get("/openapi.json")).json()
    listing = spec["paths"]["/api/v1/workflows"]["get"]
    assert {"200", "422"} <= set(listing["responses"])
    params = {p["name"]: p["schema"] for p in listing["parameters"]}
    status = next(s for s in params["status"]["anyOf"] if "enum" in s)
    assert tuple(status["enum"]) == RUN_STATUSES, "HTTP's enum is the manager's list of statuses"
    assert params["limit"]["default"] == 50 and params["limit"]["maximum"] == 500


async def test_cli_lists_runs_as_json_and_refuses_bad_input_with_one_line(app: App, wdb: asyncpg.Pool,
                                                                         cli_env: dict[str, str]) -> None:
    runs = await start_runs(app, "t.steps", 2)
    env = {**cli_env, "DL_PIPELINE_MODULES": "tests.workflows.flows"}
    listed = await asyncio.to_thread(invoke, ["workflows", "list", "--workflow", "t.steps", "--limit", "1"], env)
    assert listed.exit_code == 0, listed.output
    page = json.loads(listed.stdout)
    assert [r["run_id"] for r in page["runs"]] == [str(runs[1])]
    more = await asyncio.to_thread(invoke, ["workflows", "list", "--cursor", page["next_cursor"]], env)
    assert [r["run_id"] for r in json.loads(more.stdout)["runs"]] == [str(runs[0])]
    for args in (["--status", "sleeping"], ["--limit", "0"], ["--workflow", "bad name"]):
        answer = await asyncio.to_thread(invoke, ["workflows", "list", *args], env)
        lines = [line for line in answer.stderr.splitlines() if line.startswith("dataloader:")]
        assert answer.exit_code == 2 and len(lines) == 1, (args, answer.output)
        assert lines[0].startswith("dataloader: validation_error:"), lines


def _sync_list(dsn: str) -> tuple[list[str], str | None]:
    from dataloader import SyncApp
    from tests.workflows.conftest import workflow_settings

    with SyncApp(workflow_settings(dsn)) as sync:
        page = sync.workflows.list(workflow="t.wait", limit=1)
        return [r.workflow for r in page.runs], page.next_cursor


async def test_sync_app_lists_runs(app: App, wdb: asyncpg.Pool, dsn: str) -> None:
    await start_runs(app, "t.wait", 2)
    workflows, cursor = await asyncio.to_thread(_sync_list, dsn)
    assert workflows == ["t.wait"] and cursor is not None
