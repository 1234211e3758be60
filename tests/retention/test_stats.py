"""Stats from the rollup, checked against numbers computed by hand on a small fixture; error
grouping; the HTTP routes (and their bad input); the CLI."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime, timedelta

import httpx
import pytest
from typer.testing import CliRunner

from dataloader import App, Settings
from dataloader.api import create_app
from dataloader.cli import app as cli_app
from dataloader.model.clock import ManualClock
from dataloader.retention.rollup import StatsRollup, StatsSettings, rollup
from dataloader.retention.stats import BOUNDS, error_group, histogram_quantile
from tests.retention.rows import add_job

HOUR = 3600.0


def settings(dsn: str) -> Settings:
    return Settings(db_dsn=dsn, workers=[], stats_lag_sec=0)


@pytest.fixture(autouse=True)
async def fresh_rollup(db):
    """The fixtures write jobs that finished in the past: start each test with no watermark."""
    await db.execute("TRUNCATE dl_stats_state, dl_stats_hourly, dl_stats_hist, dl_stats_errors")


def output_json(result) -> object:
    """The command's JSON (log lines, if any, come before it)."""
    text = result.stdout
    return json.loads(text[text.index("\n{") + 1:] if not text.startswith("{") else text)


async def test_numbers_match_a_hand_computed_fixture(dsn, db):
    # 20 succeeded jobs of queue "a": run 1..20 s, each waited 2 s (due 2 s before its claim)
    for k in range(1, 21):
        await add_job(db, queue="a", status="succeeded", finished_ago=600, picked_ago=600 + k, created_ago=602 + k)
    # 2 failed (run 10 s, waited 0), one canceled while queued (no run, no wait)
    await add_job(db, queue="a", status="failed", finished_ago=600, picked_ago=610, error="boom\nTraceback ...")
    await add_job(db, queue="a", status="failed", finished_ago=600, picked_ago=610, error="boom\nother details")
    await add_job(db, queue="a", status="canceled", finished_ago=600, picked_ago=None, created_ago=900)
    # a delayed job: enqueued 1000 s ago, due 100 s before its claim -> wait 100 s, not 400
    await add_job(db, queue="b", status="succeeded", finished_ago=600, picked_ago=605, created_ago=1000,
                  available_ago=705)
    # too recent for a lag of 300 s: not counted yet
    await add_job(db, queue="b", status="succeeded", finished_ago=10, picked_ago=11)

    counted = await rollup(db, lag_sec=300, keep_sec=86400)
    assert counted == 24
    assert await rollup(db, lag_sec=300, keep_sec=86400) == 0  # incremental: nothing twice

    async with App(settings(dsn)) as app:
        report = await app.stats(hours=3)
        queues = {q["queue"]: q for q in report["queues"]}
        a = queues["a"]
        assert a["finished"] == {"canceled": 1, "failed": 2, "succeeded": 20} and a["total"] == 23
        run = a["run_sec"]
        assert run["count"] == 22
        assert run["mean"] == pytest.approx((sum(range(1, 21)) + 20) / 22, abs=0.05)  # rows written ms apart
        assert run["max"] == pytest.approx(20, abs=0.05)
        # exact p95 of {1..20, 10, 10} is ~19; the histogram is within one bucket (25 %)
        assert 19 / 1.25 <= run["p95"] <= 20
        assert a["wait_sec"]["count"] == 22
        assert a["wait_sec"]["mean"] == pytest.approx(40 / 22, abs=0.05)
        b = queues["b"]
        assert b["total"] == 1 and b["wait_sec"]["mean"] == pytest.approx(100, abs=0.05)
        assert len(a["hours"]) >= 1 and sum(h["total"] for h in a["hours"]) == 23

        errors = await app.stats_errors(since=datetime.now(UTC) - timedelta(hours=2))
        assert [(e["queue"], e["error"], e["jobs"]) for e in errors["errors"]] == [("a", "boom", 2)]

        # the late job is counted once the lag has passed
        assert await rollup(db, lag_sec=0, keep_sec=86400) == 1


async def test_error_groups_first_line_trimmed_and_truncated(dsn, db):
    long = "x" * 500
    texts = ["  timeout after 30s  \nat line 1", "timeout after 30s\nat line 2", long + "1", long + "2", None, "",
             "lease expired: the worker stopped heartbeating (attempt 1)"]
    for text in texts:
        await add_job(db, queue="e", status="failed" if text != texts[-1] else "lost", finished_ago=120,
                      picked_ago=121, error=text)
    await rollup(db, lag_sec=0, keep_sec=86400)
    async with App(settings(dsn)) as app:
        rows = (await app.stats_errors(queue="e", since=datetime.now(UTC) - timedelta(hours=1)))["errors"]
    groups = {r["error"]: r["jobs"] for r in rows}
    assert groups == {"timeout after 30s": 2, "x" * 200: 2, "(no error text)": 2,
                      "lease expired: the worker stopped heartbeating (attempt 1)": 1}
    assert error_group(texts[0]) == "timeout after 30s" and error_group(long) == "x" * 200


async def test_error_groups_include_failures_the_rollup_has_not_reached(dsn, db):
    # Rolled up with the default lag (60 s): the failure of 5 s ago is past the watermark.
    await add_job(db, queue="t", status="failed", finished_ago=600, picked_ago=601, error="boom\nold")
    await add_job(db, queue="t", status="failed", finished_ago=5, picked_ago=6, error="boom\nnew")
    recent = await add_job(db, queue="t", status="lost", finished_ago=2, picked_ago=3, error="lease expired")
    assert await rollup(db, lag_sec=60, keep_sec=86400) == 1
    async with App(settings(dsn)) as app:
        since = datetime.now(UTC) - timedelta(hours=1)
        rows = (await app.stats_errors(queue="t", since=since))["errors"]
        assert {r["error"]: r["jobs"] for r in rows} == {"boom": 2, "lease expired": 1}
        assert next(r for r in rows if r["error"] == "lease expired")["last_job_id"] == str(recent)
        # rolled up later, each failure still counts once
        assert await rollup(db, lag_sec=0, keep_sec=86400) == 2
        again = (await app.stats_errors(queue="t", since=since))["errors"]
        assert {r["error"]: r["jobs"] for r in again} == {"boom": 2, "lease expired": 1}
        assert (await app.stats_errors(queue="other", since=since))["errors"] == []


def test_histogram_quantile_is_within_one_bucket():
    values = [0.5 + i * 0.01 for i in range(1000)]
    buckets: dict[int, int] = {}
    for v in values:
        index = next((i for i, bound in enumerate(BOUNDS) if v < bound), len(BOUNDS))
        buckets[index] = buckets.get(index, 0) + 1
    exact = sorted(values)[949]
    got = histogram_quantile(buckets, 0.95, maximum=max(values))
    assert exact / 1.25 <= got <= exact * 1.25
    assert histogram_quantile({}, 0.95) is None


@pytest.fixture
async def client(dsn, db):
    async with App(settings(dsn)) as app:
        transport = httpx.ASGITransport(app=create_app(app.settings, context=app))
        async with httpx.AsyncClient(transport=transport, base_url="http://dl.test") as c:
            yield c


async def test_http_stats_errors_and_retention(client, dsn, db):
    await add_job(db, queue="h", status="failed", finished_ago=60, picked_ago=61, error="bad row")
    async with App(settings(dsn)) as other:
        await other.rollup_stats()
    body = (await client.get("/api/v1/stats", params={"queue": "h"})).json()
    assert body["queues"][0]["finished"] == {"failed": 1} and "from" in body
    errors = (await client.get("/api/v1/stats/errors")).json()
    assert errors["errors"][0]["error"] == "bad row"
    retention = (await client.get("/api/v1/retention")).json()
    assert retention["default_sec"]["failed"] == 30 * 86400
    dry = await client.post("/api/v1/maintenance/prune", json={"older_than": "1h"})
    assert dry.status_code == 200 and dry.json()["dry_run"] is True
    schema = (await client.get("/openapi.json")).json()
    assert {"/api/v1/stats", "/api/v1/stats/errors", "/api/v1/retention", "/api/v1/maintenance/prune"} <= set(
        schema["paths"])


async def test_http_stats_unrolled_counts_what_the_rollup_has_not_reached(client, db):
    """The console's overview count (finished since the last rollup) over HTTP too: without
    `unrolled` the job is not counted yet, with it once; anything but true/false is a 422."""
    await add_job(db, queue="u", status="succeeded", finished_ago=5, picked_ago=6)
    rolled = (await client.get("/api/v1/stats", params={"queue": "u"})).json()
    assert rolled["queues"] == [] or rolled["queues"][0]["finished"] == {}
    unrolled = (await client.get("/api/v1/stats", params={"queue": "u", "unrolled": "true"})).json()
    assert unrolled["queues"][0]["finished"] == {"succeeded": 1}
    assert (await client.get("/api/v1/stats", params={"unrolled": "1"})).status_code == 422


@pytest.mark.parametrize(("method", "path", "kwargs"), [
    ("get", "/api/v1/stats", {"params": {"from": "yesterday"}}),
    ("get", "/api/v1/stats", {"params": {"from": "2030-01-02T00:00:00Z", "to": "2030-01-01T00:00:00Z"}}),
    ("get", "/api/v1/stats", {"params": {"from": "2020-01-01T00:00:00Z", "to": "2030-01-01T00:00:00Z"}}),
    ("get", "/api/v1/stats", {"params": {"to": "0001-01-01T00:00:00Z"}}),
    ("get", "/api/v1/stats", {"params": {"queue": ""}}),
    ("get", "/api/v1/stats/errors", {"params": {"limit": 0}}),
    ("get", "/api/v1/stats/errors", {"params": {"since": "2030-01-01"}}),
    ("post", "/api/v1/maintenance/prune", {"json": {"older_than": "soon", "dry_run": False}}),
    ("post", "/api/v1/maintenance/prune", {"json": {"statuses": ["queued"], "dry_run": False}}),
    ("post", "/api/v1/maintenance/prune", {"json": {"dry_run": False, "extra": 1}}),
])
async def test_bad_input_is_a_4xx_in_the_error_shape_and_writes_nothing(client, db, method, path, kwargs):
    await add_job(db, queue="h", status="succeeded", finished_ago=40 * 86400)
    before = await db.fetchval("SELECT count(*) FROM dl_jobs")
    response = await getattr(client, method)(path, **kwargs)
    assert 400 <= response.status_code < 500, response.text
    assert set(response.json()) >= {"error", "detail"}
    assert await db.fetchval("SELECT count(*) FROM dl_jobs") == before


async def test_cli_stats_and_prune(dsn, db, monkeypatch):
    monkeypatch.setenv("DL_DB_DSN", dsn)
    monkeypatch.setenv("WORKERS_JSON", "[]")
    monkeypatch.setenv("DL_STATS_LAG_SEC", "0")
    await add_job(db, queue="cli", status="succeeded", finished_ago=3 * 86400, picked_ago=3 * 86400 + 2)

    def invoke(*args: str):  # the CLI runs its own event loop: in a thread of its own
        return asyncio.to_thread(CliRunner().invoke, cli_app, list(args))

    result = await invoke("jobs", "prune", "--older-than", "2d", "--dry-run")
    assert result.exit_code == 0, result.output
    assert output_json(result)["pruned"] == [
        {"queue": "cli", "status": "succeeded", "jobs": 1, "older_than_sec": 172800.0}]
    bad = await invoke("jobs", "prune", "--older-than", "soon")
    assert bad.exit_code == 2 and "not a duration" in bad.output
    result = await invoke("stats", "--queue", "cli", "--hours", "100")
    assert result.exit_code == 0, result.output
    assert output_json(result)["queues"][0]["finished"] == {"succeeded": 1}
    result = await invoke("jobs", "prune", "--older-than", "2d")
    assert output_json(result)["total"] == 1


class CountingPool:
    """The test pool, counting the round trips a caller starts on it (a statement, or a connection
    taken for a transaction)."""

    def __init__(self, pool) -> None:
        self.pool = pool
        self.calls: list[str] = []

    def __getattr__(self, name: str):
        attr = getattr(self.pool, name)
        if name not in ("fetch", "fetchrow", "fetchval", "execute", "acquire"):
            return attr

        def counted(*args, **kwargs):
            self.calls.append(name)
            return attr(*args, **kwargs)

        return counted


def mid_hour_clock() -> ManualClock:
    """The service's clock (model/clock.py), pinned half an hour into the current hour: the ticks of
    a test see one hour whenever the test runs, until the test moves it."""
    now = datetime.now(UTC)
    return ManualClock(wall_start=now.replace(minute=30, second=0, microsecond=0))


async def test_an_idle_leaders_tick_reads_the_watermark_and_stops(dsn, db):
    """Nothing finished since the last tick, same hour: one read, one transaction that finds the
    watermark caught up; no second transaction, prune or export. The hour is the service's clock's,
    pinned mid-hour: this test once failed when its two ticks straddled an hour (issue 35)."""
    await add_job(db, queue="idle-stats", status="succeeded", finished_ago=2 * HOUR, picked_ago=2 * HOUR + 1)
    counting = CountingPool(db)
    stats = StatsRollup(counting, StatsSettings(lag_sec=0), clock=mid_hour_clock())
    assert await stats.tick() == 1
    counting.calls.clear()
    assert await stats.tick() == 0
    assert counting.calls == ["fetchrow", "acquire"]


async def test_the_next_hour_of_the_services_clock_prunes_and_exports_again(dsn, db):
    """Idle, the tick in the same hour stops at the watermark; once the service's clock crosses into
    the next hour, the tick prunes and recomputes the gauges, and the tick after stops again."""
    await add_job(db, queue="hour-stats", status="succeeded", finished_ago=2 * HOUR, picked_ago=2 * HOUR + 1)
    clock = mid_hour_clock()
    counting = CountingPool(db)
    stats = StatsRollup(counting, StatsSettings(lag_sec=0), clock=clock)
    await stats.tick()
    clock.advance(29 * 60)  # 59 minutes into the hour: the same hour
    counting.calls.clear()
    await stats.tick()
    assert counting.calls == ["fetchrow", "acquire"]
    clock.advance(2 * 60)  # one minute into the next hour
    counting.calls.clear()
    await stats.tick()
    assert len(counting.calls) > 2, "the new hour prunes and exports"
    counting.calls.clear()
    await stats.tick()
    assert counting.calls == ["fetchrow", "acquire"]
