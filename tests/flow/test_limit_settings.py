"""A queue's limits as configuration (issue 21): partial updates, clearing, the one set of defaults,
precedence of runtime changes over declarations (code, DL_QUEUES_JSON) at a node's start, and
every face (Python, sync Python, HTTP PATCH, CLI `queues set`). The enforcement is tested in
test_concurrency_limits.py and test_rate_limits.py."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator

import httpx
import pytest

from dataloader import App, Queue, Settings, SyncApp
from dataloader.api import create_app
from dataloader.exceptions import ValidationFailed
from dataloader.model.flow import QueueSettings, parse_rate, settings_from_declaration
from tests.support.cli import run


def name() -> str:
    return f"limits-{uuid.uuid4().hex[:8]}"


@pytest.fixture
async def app(db, dsn: str) -> AsyncIterator[App]:
    app = await App(Settings(db_dsn=dsn, workers=[])).open()
    try:
        yield app
    finally:
        await app.close()


def test_rates_read_as_the_docs_say():
    assert parse_rate("10/1s") == (10, 1.0)
    assert parse_rate("10/s") == (10, 1.0)
    assert parse_rate("10") == (10, 1.0)
    assert parse_rate("5/500ms") == (5, 0.5)
    assert parse_rate("100/1m") == (100, 60.0)
    assert parse_rate("1000/1h") == (1000, 3600.0)
    assert parse_rate(" 3 / 2.5s ") == (3, 2.5)
    for bad in ("", "x", "10/", "10/0s", "0/1s", "10/1y", "-1/1s", "10/5ms", "10/2d", True, None, 1.5):
        with pytest.raises(ValidationFailed):
            parse_rate(bad)


def test_declarations_share_the_one_validation():
    assert settings_from_declaration({"concurrency": 5, "rate": "10/1s"}) == QueueSettings(
        concurrency=5, rate_limit=10, rate_period_sec=1.0)
    assert settings_from_declaration({"rate_limit": 7}) == QueueSettings(rate_limit=7, rate_period_sec=1.0)
    for bad in ({"concurrency": 0}, {"nope": 1}, {"rate": "10/1s", "rate_limit": 3}, {"rate_period_sec": 2}, [1]):
        with pytest.raises(ValidationFailed):
            settings_from_declaration(bad)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="concurrency"):
        Queue("load", 2, limits={"concurrency": 0})
    with pytest.raises(ValueError, match="rate"):
        Settings(queues_json='{"load": {"rate": "ten"}}')


async def test_a_partial_update_keeps_what_it_does_not_name_and_none_clears(app, db):
    queue = name()
    first = await app.configure_queue(queue, concurrency=5, rate_limit=10)
    assert first.settings == QueueSettings(concurrency=5, rate_limit=10, rate_period_sec=1.0)
    assert first.settings_source == "runtime" and first.paused is False
    second = await app.configure_queue(queue, partition_concurrency=1, rate_period_sec=2)
    assert second.settings == QueueSettings(concurrency=5, partition_concurrency=1, rate_limit=10, rate_period_sec=2.0)
    third = await app.configure_queue(queue, rate_limit=None, concurrency=None)
    assert third.settings == QueueSettings(partition_concurrency=1)  # a cleared rate drops its period
    await app.pause_queue(queue)  # a pause keeps the limits, and the limits keep the pause
    fourth = await app.configure_queue(queue, concurrency=2)
    assert fourth.paused and fourth.settings == QueueSettings(concurrency=2, partition_concurrency=1)
    listed = {q.queue: q for q in await app.queues()}
    assert listed[queue].settings == fourth.settings and listed[queue].to_dict()["concurrency"] == 2


async def test_a_refused_change_writes_nothing(app, db):
    queue = name()
    await app.configure_queue(queue, concurrency=5)
    with pytest.raises(ValidationFailed):
        await app.configure_queue(queue, concurrency=1, partition_rate_period_sec=3)  # a period of no rate
    assert (await app.flow.repo.get(queue)).settings == QueueSettings(concurrency=5)


async def test_concurrent_partial_changes_compose(app, db):
    queue = name()
    await asyncio.gather(*(app.configure_queue(queue, **{field: 3})
                           for field in ("concurrency", "partition_concurrency", "rate_limit", "partition_rate_limit")))
    assert (await app.flow.repo.get(queue)).settings == QueueSettings(
        concurrency=3, partition_concurrency=3, rate_limit=3, rate_period_sec=1.0, partition_rate_limit=3,
        partition_rate_period_sec=1.0)


async def test_declared_limits_apply_at_start_unless_set_at_run_time(app, db, dsn):
    declared, overridden, by_settings = name(), name(), name()
    await app.configure_queue(overridden, concurrency=7)
    node = await App(Settings(db_dsn=dsn, workers=[Queue(declared, 1, limits={"concurrency": 2, "rate": "5/1s"}),
                                                    Queue(overridden, 1, limits={"concurrency": 3})],
                              queues_json={by_settings: {"partition_concurrency": 1},
                                           declared: {"concurrency": 4}})).open()
    try:
        async with node.running():
            pass
    finally:
        await node.close()
    got = {q: (await app.flow.repo.get(q)) for q in (declared, overridden, by_settings)}
    assert got[declared].settings == QueueSettings(concurrency=4)  # DL_QUEUES_JSON over code
    assert got[declared].settings_source == "declared"
    assert got[overridden].settings == QueueSettings(concurrency=7)  # the runtime change wins
    assert got[overridden].settings_source == "runtime"
    assert got[by_settings].settings == QueueSettings(partition_concurrency=1)


def test_sync_app_configures_too(db, dsn):
    queue = name()
    with SyncApp(Settings(db_dsn=dsn, workers=[])) as app:
        assert app.configure_queue(queue, concurrency=3).settings == QueueSettings(concurrency=3)
        assert {q.queue: q for q in app.queues()}[queue].settings.concurrency == 3


async def test_http_patch_and_its_documentation(app, db):
    queue = name()
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=create_app(app.settings, context=app)),
                                 base_url="http://t") as client:
        done = await client.patch(f"/api/v1/queues/{queue}", json={"concurrency": 5, "rate_limit": 10,
                                                                    "rate_period_sec": 2})
        assert done.status_code == 200, done.text
        body = done.json()
        assert (body["concurrency"], body["rate_limit"], body["rate_period_sec"], body["settings_source"]) == (
            5, 10, 2.0, "runtime")
        assert set(body["held_back"]) == {"concurrency", "partition_concurrency", "rate", "partition_rate"}
        cleared = (await client.patch(f"/api/v1/queues/{queue}", json={"rate_limit": None})).json()
        assert cleared["rate_limit"] is None and cleared["rate_period_sec"] is None and cleared["concurrency"] == 5
        unknown = await client.patch(f"/api/v1/queues/{queue}", json={"concurency": 5})
        assert unknown.status_code == 422 and unknown.json()["error"] == "validation_error"
        as_text = await client.patch(f"/api/v1/queues/{queue}", json={"concurrency": "5"})
        assert as_text.status_code == 422
        listed = {q["queue"]: q for q in (await client.get("/api/v1/queues")).json()["queues"]}
        assert listed[queue]["concurrency"] == 5
        spec = (await client.get("/openapi.json")).json()
        patch = spec["paths"]["/api/v1/queues/{queue}"]["patch"]
        assert patch["summary"] and "422" in patch["responses"] and "503" in patch["responses"]


async def test_cli_set(db, cli_env):
    queue = name()
    done = await asyncio.to_thread(run, ["queues", "set", queue, "--concurrency", "5", "--rate", "10/1s",
                                         "--partition-rate", "2/500ms"], cli_env)
    assert done.returncode == 0, done.stderr
    body = json.loads(done.stdout)
    assert (body["concurrency"], body["rate_limit"], body["rate_period_sec"], body["partition_rate_limit"],
            body["partition_rate_period_sec"]) == (5, 10, 1.0, 2, 0.5)
    cleared = await asyncio.to_thread(run, ["queues", "set", queue, "--rate", "none", "--concurrency", "none"], cli_env)
    body = json.loads(cleared.stdout)
    assert (body["concurrency"], body["rate_limit"], body["partition_rate_limit"]) == (None, None, 2)
    bad = await asyncio.to_thread(run, ["queues", "set", queue, "--concurrency", "many"], cli_env)
    assert bad.returncode == 2
    assert bad.stderr.strip().splitlines() == ["dataloader: validation_error: concurrency: must be an integer or none"]
