"""Reading a pruned job back from the archive on every face: Python (`app.archive.history`, and
SyncApp's), HTTP `GET /api/v1/archive/jobs/{id}` (the one error shape), the CLI's `jobs history
ID --archive URL` (one line and an exit code on bad input), and the console's job page, which shows
a job gone from the database but found in the archive as archived."""

from __future__ import annotations

import asyncio
import json
import uuid

import fsspec
import httpx
import pytest

from dataloader import App, Settings, SyncApp
from dataloader.api import create_app
from tests.retention.rows import add_job, exists
from tests.support.cli import invoke

DAY = 86400.0


@pytest.fixture
def url() -> str:
    root = f"memory://faces-{uuid.uuid4().hex}"
    yield root
    fs = fsspec.filesystem("memory")
    if fs.exists(root):
        fs.rm(root, recursive=True)


@pytest.fixture
async def pruned(db, dsn, url) -> uuid.UUID:
    """A failed job with a three-row journal, pruned into the archive at `url` by `App.prune`."""
    job = await add_job(db, queue="faces", status="failed", finished_ago=40 * DAY, picked_ago=40 * DAY + 3,
                        error="Traceback: boom")
    async with App(Settings(db_dsn=dsn, workers=[], archive_url=url)) as app:
        report = await app.prune()
    assert report.archived_files == 1 and await exists(db, job) == (False, 0)
    return job


async def test_python(dsn, url, pruned):
    async with App(Settings(db_dsn=dsn, workers=[], archive_url=url)) as app:
        found = await app.archive.history(pruned)
        assert found.status == "failed" and [e.kind for e in found.events] == ["queued", "picked", "failed"]
        assert found.to_dict()["archived"] is True


async def test_sync_app(dsn, url, pruned):
    def read() -> list[str]:
        with SyncApp(Settings(db_dsn=dsn, workers=[], archive_url=url)) as app:
            return [e.kind for e in app.archive.history(pruned).events]

    assert await asyncio.to_thread(read) == ["queued", "picked", "failed"]


async def test_http(dsn, url, pruned):
    async with App(Settings(db_dsn=dsn, workers=[], archive_url=url)) as app:
        transport = httpx.ASGITransport(app=create_app(app.settings, context=app))
        async with httpx.AsyncClient(transport=transport, base_url="http://api") as client:
            answer = await client.get(f"/api/v1/archive/jobs/{pruned}")
            assert answer.status_code == 200, answer.text
            body = answer.json()
            assert body["archived"] and body["job"]["error"] == "Traceback: boom"
            assert [e["kind"] for e in body["events"]] == ["queued", "picked", "failed"]
            missing = await client.get(f"/api/v1/archive/jobs/{uuid.uuid4()}")
            assert missing.status_code == 404 and missing.json()["error"] == "job_not_found"
            bad = await client.get("/api/v1/archive/jobs/not-a-uuid")
            assert bad.status_code == 422 and bad.json()["error"] == "validation_error"
    async with App(Settings(db_dsn=dsn, workers=[])) as app:  # no DL_ARCHIVE_URL
        transport = httpx.ASGITransport(app=create_app(app.settings, context=app))
        async with httpx.AsyncClient(transport=transport, base_url="http://api") as client:
            answer = await client.get(f"/api/v1/archive/jobs/{pruned}")
            assert answer.status_code == 404 and answer.json()["error"] == "archive_not_configured"


async def test_cli(url, pruned):
    result = await asyncio.to_thread(invoke, ["jobs", "history", str(pruned), "--archive", url])
    assert result.exit_code == 0, result.output
    assert [e["kind"] for e in json.loads(result.stdout)] == ["queued", "picked", "failed"]
    by_env = await asyncio.to_thread(invoke, ["jobs", "history", str(pruned)], {"DL_ARCHIVE_URL": url})
    assert by_env.exit_code == 0 and json.loads(by_env.stdout) == json.loads(result.stdout)
    for args, code, said in (
        (["jobs", "history", str(pruned), "--archive", "bogus://x"], 2, "validation_error: --archive:"),
        (["jobs", "history", "nope", "--archive", url], 2, "validation_error"),
        (["jobs", "history", str(uuid.uuid4()), "--archive", url], 1, "job_not_found"),
        (["jobs", "history", str(pruned)], 1, "archive_not_configured"),
    ):
        bad = await asyncio.to_thread(invoke, args)
        assert bad.exit_code == code and said in bad.stderr and len(bad.stderr.strip().splitlines()) == 1, args
    # a bad DL_ARCHIVE_URL stops any command at its start, as every setting does
    for args in (["jobs", "history", str(pruned)], ["jobs", "list"]):
        bad = await asyncio.to_thread(invoke, args, {"DL_ARCHIVE_URL": "bogus://x"})
        code, said = 2, "configuration error: DL_ARCHIVE_URL: 'bogus://x': Protocol not known: bogus"
        assert bad.exit_code == code and said in bad.stderr and len(bad.stderr.strip().splitlines()) == 1, args


async def test_console_shows_an_archived_job(dsn, url, pruned):
    async with App(Settings(db_dsn=dsn, workers=[], archive_url=url)) as app:
        transport = httpx.ASGITransport(app=create_app(app.settings, context=app))
        async with httpx.AsyncClient(transport=transport, base_url="http://console") as client:
            page = await client.get(f"/ui/jobs/{pruned}")
            assert page.status_code == 200, page.text
            assert 'id="job-archived"' in page.text and "Traceback: boom" in page.text
            assert page.text.count("data-event=") == 3
            gone = await client.get(f"/ui/jobs/{uuid.uuid4()}")
            assert gone.status_code == 404
