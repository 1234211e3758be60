"""Set one job's priority and delete one job: the rules behind every face (Python, SyncApp, HTTP,
the CLI, the console's job page), against a real PostgreSQL.

- priority: a queued job only (the claim is its only reader), journaled as `priority_changed` with
  the old and new value in the same statement; the same priority again writes nothing;
- delete: a finished job only, with its journal (as the bulk delete); a queued or running job is
  refused (cancel it first) and nothing is written.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator

import httpx
import pytest

from dataloader import App, JobNotFinished, JobNotFound, JobNotQueued, Settings, SyncApp, ValidationFailed
from dataloader.api import create_app
from tests.support.cli import error_line, invoke
from tests.support.engine import enqueue
from tests.ui.conftest import csrf_of


@pytest.fixture
async def app(db, dsn: str) -> AsyncIterator[App]:
    app = await App(Settings(db_dsn=dsn, workers=[])).open()
    yield app
    await app.close()


@pytest.fixture
async def http(app: App) -> AsyncIterator[httpx.AsyncClient]:
    transport = httpx.ASGITransport(app=create_app(app.settings, context=app))
    async with httpx.AsyncClient(transport=transport, base_url="http://jobs") as client:
        yield client


async def journal(db, job_id: uuid.UUID) -> list[tuple[str, dict]]:
    rows = await db.fetch("SELECT kind, payload FROM dl_job_events WHERE job_id = $1 ORDER BY event_id", job_id)
    return [(r["kind"], json.loads(r["payload"]) if isinstance(r["payload"], str) else r["payload"]) for r in rows]


async def finish(db, job_id: uuid.UUID, status: str = "succeeded") -> None:
    await db.execute(f"UPDATE dl_jobs SET status = '{status}', finished_at = now() WHERE job_id = $1", job_id)


async def test_a_queued_jobs_priority_changes_with_its_journal_row_and_the_same_value_writes_nothing(app, db):
    job_id = await enqueue(db, "dl.noop", queue="prio")
    job = await app.set_job_priority(job_id, 7)
    assert job.priority == 7 and await db.fetchval("SELECT priority FROM dl_jobs WHERE job_id = $1", job_id) == 7
    changed = [p for kind, p in await journal(db, job_id) if kind == "priority_changed"]
    assert changed == [{"reason": "manual_set_priority", "from": 100, "to": 7}]
    again = await app.set_job_priority(str(job_id), 7)  # a job id as text, as every face takes it
    assert again.priority == 7
    assert [k for k, _ in await journal(db, job_id)].count("priority_changed") == 1


@pytest.mark.parametrize("status", ["running", "succeeded", "failed", "canceled", "lost"])
async def test_priority_of_a_job_that_is_not_queued_is_refused_and_writes_nothing(app, db, status):
    job_id = await enqueue(db, "dl.noop", queue="prio")
    await db.execute(f"UPDATE dl_jobs SET status = '{status}' WHERE job_id = $1", job_id)
    before = await journal(db, job_id)
    with pytest.raises(JobNotQueued, match=status):
        await app.set_job_priority(job_id, 1)
    assert await db.fetchval("SELECT priority FROM dl_jobs WHERE job_id = $1", job_id) == 100
    assert await journal(db, job_id) == before


@pytest.mark.parametrize("bad", [-1, 2**31, "5", "high", True, 1.5, None])
async def test_a_bad_priority_is_a_validation_error_and_writes_nothing(app, db, bad):
    job_id = await enqueue(db, "dl.noop", queue="prio")
    with pytest.raises(ValidationFailed) as caught:
        await app.set_job_priority(job_id, bad)
    assert caught.value.fields[0]["loc"] == ["priority"]
    assert await db.fetchval("SELECT priority FROM dl_jobs WHERE job_id = $1", job_id) == 100
    assert "priority_changed" not in [k for k, _ in await journal(db, job_id)]


@pytest.mark.parametrize("status", ["succeeded", "failed", "canceled", "lost"])
async def test_a_finished_job_is_deleted_with_its_journal(app, db, status):
    job_id = await enqueue(db, "dl.noop", queue="del")
    keep = await enqueue(db, "dl.noop", queue="del")
    await finish(db, job_id, status)
    await finish(db, keep, status)
    assert await journal(db, job_id)
    await app.delete_job(job_id)
    assert await db.fetchval("SELECT count(*) FROM dl_jobs WHERE job_id = $1", job_id) == 0
    assert await journal(db, job_id) == []
    assert await db.fetchval("SELECT count(*) FROM dl_jobs WHERE job_id = $1", keep) == 1
    with pytest.raises(JobNotFound):
        await app.delete_job(job_id)


@pytest.mark.parametrize("status", ["queued", "running"])
async def test_a_live_job_is_not_deleted(app, db, status):
    job_id = await enqueue(db, "dl.noop", queue="del")
    await db.execute(f"UPDATE dl_jobs SET status = '{status}' WHERE job_id = $1", job_id)
    before = await journal(db, job_id)
    with pytest.raises(JobNotFinished, match="cancel it first"):
        await app.delete_job(job_id)
    assert await db.fetchval("SELECT status::text FROM dl_jobs WHERE job_id = $1", job_id) == status
    assert await journal(db, job_id) == before


async def test_http_patch_and_delete(app, http, db):
    job_id = await enqueue(db, "dl.noop", queue="http")
    moved = await http.patch(f"/api/v1/jobs/{job_id}", json={"priority": 3})
    assert moved.status_code == 200, moved.text
    assert moved.json()["priority"] == 3 and moved.json()["job_id"] == str(job_id)
    request_id = moved.headers.get("x-request-id")
    changed = [p for kind, p in await journal(db, job_id) if kind == "priority_changed"]
    assert changed[0]["to"] == 3 and changed[0].get("request_id") == request_id

    assert (await http.patch(f"/api/v1/jobs/{job_id}", json={"priority": "3"})).json()["error"] == "validation_error"
    assert (await http.patch(f"/api/v1/jobs/{job_id}", json={})).json()["error"] == "validation_error"
    assert (await http.patch(f"/api/v1/jobs/{job_id}", json={"priority": 1, "queue": "x"})
            ).json()["error"] == "validation_error"
    busy = await http.delete(f"/api/v1/jobs/{job_id}")
    assert busy.status_code == 409 and busy.json()["error"] == "job_not_finished"

    await finish(db, job_id)
    late = await http.patch(f"/api/v1/jobs/{job_id}", json={"priority": 1})
    assert late.status_code == 409 and late.json()["error"] == "job_not_queued"
    gone = await http.delete(f"/api/v1/jobs/{job_id}")
    assert gone.status_code == 204 and gone.content == b""
    missing = await http.delete(f"/api/v1/jobs/{job_id}")
    assert missing.status_code == 404 and missing.json()["error"] == "job_not_found"
    assert (await http.patch(f"/api/v1/jobs/{job_id}", json={"priority": 1})).status_code == 404


async def test_the_openapi_documents_both(http):
    paths = (await http.get("/openapi.json")).json()["paths"]["/api/v1/jobs/{job_id}"]
    assert set(paths) >= {"patch", "delete"}
    assert {"404", "409", "422"} <= set(paths["patch"]["responses"])
    assert {"204", "404", "409"} <= set(paths["delete"]["responses"])


async def test_the_cli_sets_a_priority_and_deletes(db, dsn):
    env = {"DL_DB_DSN": dsn}
    job_id = await enqueue(db, "dl.noop", queue="cli")
    result = await asyncio.to_thread(invoke, ["jobs", "set-priority", str(job_id), "0"], env)
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["priority"] == 0
    refused = await asyncio.to_thread(invoke, ["jobs", "delete", str(job_id)], env)
    assert refused.exit_code == 1 and error_line(refused).startswith("dataloader: job_not_finished: ")
    await finish(db, job_id, "failed")
    result = await asyncio.to_thread(invoke, ["jobs", "delete", str(job_id)], env)
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout) == {"job_id": str(job_id), "deleted": True}
    assert await db.fetchval("SELECT count(*) FROM dl_jobs WHERE job_id = $1", job_id) == 0


def test_sync_app_sets_a_priority_and_deletes(db, dsn):
    loop = asyncio.get_event_loop_policy().new_event_loop()
    try:
        job_id = loop.run_until_complete(_queued(dsn))
        with SyncApp(Settings(db_dsn=dsn, workers=[])) as sync:
            assert sync.set_job_priority(job_id, 9).priority == 9
            with pytest.raises(JobNotFinished):
                sync.delete_job(job_id)
            sync.cancel(job_id)
            assert sync.delete_job(job_id) is None
            with pytest.raises(JobNotFound):
                sync.get(job_id)
    finally:
        loop.close()


async def _queued(dsn: str) -> uuid.UUID:
    async with App(Settings(db_dsn=dsn, workers=[])) as app:
        return (await app.enqueue("dl.noop", queue="sync")).id


async def test_the_console_job_page_calls_the_same_app_methods(app, http, db):
    job_id = await enqueue(db, "dl.noop", queue="ui")
    operations = await db.fetchval("SELECT count(*) FROM dl_operations")
    page = await http.get(f"/ui/jobs/{job_id}")
    assert 'id="set-priority"' in page.text and 'id="delete-job"' not in page.text
    csrf = csrf_of(page.text)
    bad = await http.post(f"/ui/jobs/{job_id}/priority", data={"csrf": csrf, "priority": "high"})
    assert bad.status_code == 422 and "validation_error" in bad.text
    moved = await http.post(f"/ui/jobs/{job_id}/priority", data={"csrf": csrf, "priority": "7"})
    assert moved.status_code == 303 and moved.headers["location"] == f"/ui/jobs/{job_id}"
    assert await db.fetchval("SELECT priority FROM dl_jobs WHERE job_id = $1", job_id) == 7
    assert "priority_changed" in (await http.get(f"/ui/jobs/{job_id}")).text
    # a delete asks first (tests/ui/test_confirm_and_notice.py); confirmed, the App refuses it
    refused = await http.post(f"/ui/jobs/{job_id}/delete", data={"csrf": csrf, "confirm": "yes"})
    assert refused.status_code == 409 and "job_not_finished" in refused.text
    await finish(db, job_id, "canceled")
    late = await http.post(f"/ui/jobs/{job_id}/priority", data={"csrf": csrf, "priority": "1"})
    assert late.status_code == 409 and "job_not_queued" in late.text
    page = await http.get(f"/ui/jobs/{job_id}")
    assert 'id="set-priority"' not in page.text and 'id="delete-job"' in page.text
    gone = await http.post(f"/ui/jobs/{job_id}/delete", data={"csrf": csrf, "confirm": "yes"})
    assert gone.status_code == 303 and gone.headers["location"] == "/ui/jobs?queue=ui"
    assert await db.fetchval("SELECT count(*) FROM dl_jobs WHERE job_id = $1", job_id) == 0
    # no bulk operation stands in for them any more
    assert await db.fetchval("SELECT count(*) FROM dl_operations") == operations
