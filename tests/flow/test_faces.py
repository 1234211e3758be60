"""Pause and resume through the faces other than Python (issue 21): HTTP (`/api/v1/queues`,
documented in the OpenAPI schema with the one error shape), the CLI (`dataloader queues
list|pause|resume`, JSON out, one-line errors), and the `dl_queue_paused{queue}` metric, which
reads the database at scrape time, so every node shows the same state."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator

import httpx
import pytest

from dataloader import App, Settings
from dataloader.api import create_app
from tests.support.cli import run
from tests.support.engine import enqueue


@pytest.fixture
async def client(db, dsn: str) -> AsyncIterator[httpx.AsyncClient]:
    app = await App(Settings(db_dsn=dsn, workers=[])).open()
    try:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=create_app(app.settings, context=app)),
                                     base_url="http://t") as c:
            yield c
    finally:
        await app.close()


def paused_metric(text: str, queue: str) -> float | None:
    for line in text.splitlines():
        if line.startswith(f'dl_queue_paused{{queue="{queue}"}} '):
            return float(line.rsplit(" ", 1)[1])
    return None


async def test_http_pause_list_resume_and_the_metric(client, db):
    queue = f"flow-{uuid.uuid4().hex[:8]}"
    slashed = f"{queue}/sub"  # a job's queue may hold a slash: the route still names one queue
    await enqueue(db, "dl.noop", queue=queue)

    paused = await client.post(f"/api/v1/queues/{queue}/pause")
    assert paused.status_code == 200, paused.text
    assert paused.json()["paused"] is True and paused.json()["paused_at"]
    assert (paused.json()["running"], paused.json()["queued"]) == (0, 1)
    assert (await client.post(f"/api/v1/queues/{slashed}/pause")).json()["queue"] == slashed
    lined = f"{queue}\nline"  # a line break too: Starlette's own `path` convertor stops at one
    assert (await client.post(f"/api/v1/queues/{lined.replace(chr(10), '%0A')}/pause")).json()["queue"] == lined

    listed = {q["queue"]: q for q in (await client.get("/api/v1/queues")).json()["queues"]}
    assert {k: listed[queue][k] for k in ("queue", "paused", "paused_at", "running", "queued")} == {
        "queue": queue, "paused": True, "paused_at": paused.json()["paused_at"], "running": 0, "queued": 1}
    assert listed[slashed]["paused"] is True and listed[slashed]["queued"] == 0
    metrics = (await client.get("/metrics")).text
    assert paused_metric(metrics, queue) == 1.0

    resumed = await client.post(f"/api/v1/queues/{queue}/resume")
    assert resumed.status_code == 200 and resumed.json()["paused"] is False and resumed.json()["paused_at"] is None
    assert paused_metric((await client.get("/metrics")).text, queue) == 0.0

    bad = await client.post("/api/v1/queues/%20/pause")
    assert bad.status_code == 422 and bad.json()["error"] == "validation_error" and bad.json()["fields"]


async def test_the_routes_are_documented_with_the_error_shape(client):
    spec = (await client.get("/openapi.json")).json()
    for path, method in (("/api/v1/queues", "get"), ("/api/v1/queues/{queue}/pause", "post"),
                         ("/api/v1/queues/{queue}/resume", "post")):
        operation = spec["paths"][path][method]
        assert operation["summary"], path
        assert "200" in operation["responses"] and "503" in operation["responses"], path
    pause = spec["paths"]["/api/v1/queues/{queue}/pause"]["post"]
    assert pause["responses"]["422"]["content"]["application/json"]["schema"]["$ref"].endswith("/ErrorResponse")


async def test_cli_pause_list_resume(db, cli_env):
    queue = f"flow-{uuid.uuid4().hex[:8]}"
    paused = await asyncio.to_thread(run, ["queues", "pause", queue], cli_env)
    assert paused.returncode == 0, paused.stderr
    assert json.loads(paused.stdout)["paused"] is True
    listed = await asyncio.to_thread(run, ["queues", "list"], cli_env)
    assert {q["queue"]: q["paused"] for q in json.loads(listed.stdout)}[queue] is True
    resumed = await asyncio.to_thread(run, ["queues", "resume", queue], cli_env)
    assert resumed.returncode == 0 and json.loads(resumed.stdout)["paused"] is False
    bad = await asyncio.to_thread(run, ["queues", "pause", " "], cli_env)
    assert bad.returncode == 2
    assert bad.stderr.strip().splitlines() == ["dataloader: validation_error: queue: must not be blank"]


async def test_a_hand_written_flow_row_with_extreme_times_breaks_no_face(client, db):
    """Promise 9 for dl_queue_flow: times the column can hold (±infinity, the far ends of the range)
    are read by the listing, the metric and a resume without an error."""
    queues = [f"flow-x{i}-{uuid.uuid4().hex[:6]}" for i in range(4)]
    for queue, extreme in zip(queues, ["-infinity", "infinity", "294276-12-31 23:59:59+00",
                                       "4713-01-01 00:00:00+00 BC"], strict=True):
        await db.execute("INSERT INTO dl_queue_flow (queue, paused, paused_at, updated_at) "
                         "VALUES ($1, true, $2::text::timestamptz, $2::text::timestamptz)", queue, extreme)
    listing = await client.get("/api/v1/queues")
    assert listing.status_code == 200, listing.text
    assert {q["queue"] for q in listing.json()["queues"] if q["paused"]} >= set(queues)
    metrics = (await client.get("/metrics")).text
    assert all(paused_metric(metrics, q) == 1.0 for q in queues)
    for queue in queues:
        assert (await client.post(f"/api/v1/queues/{queue}/resume")).json()["paused"] is False
