"""Search through its faces (HTTP `POST /api/v1/search`, CLI `dataloader ops search|errors`), bad
filters as clear 4xx, and the queue-time checker (flag once, fail where the queue says so, the
per queue and task counters)."""

from __future__ import annotations

import json
import subprocess
import sys

import httpx
import pytest

from dataloader import metrics
from dataloader.api import create_app
from dataloader.jobs.queue_time import QueueTimeChecker, QueueTimeSettings
from dataloader.storage.operation_repository import QueueTimeRepository
from tests.operations.conftest import ops_settings
from tests.retention.rows import add_job
from tests.support.cli import run


@pytest.fixture
async def client(app_on_db):
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=create_app(app_on_db.settings, context=app_on_db)),
                                 base_url="http://t") as c:
        yield c


def ops_cli(env: dict[str, str], *args: str, process: bool = False) -> subprocess.CompletedProcess[str]:
    """`dataloader ops <args>` in-process; `process`: a real `python -m dataloader` (the group's one)."""
    if not process:
        return run(["ops", *args], env)
    return subprocess.run([sys.executable, "-m", "dataloader", "ops", *args], env=env, capture_output=True,
                          text=True, timeout=60)


async def fill(db) -> None:
    for i in range(6):
        await add_job(db, queue="qa", status="failed", finished_ago=60 + i, error=f"ConnectionResetError: x\n at {i}")
    for i in range(3):
        await add_job(db, queue="qb", status="failed", finished_ago=30 + i, error="KeyError: 'x'")
    await add_job(db, queue="qa", status="succeeded", finished_ago=10)


async def test_http_search_pages_counts_and_filters(client, db):
    await fill(db)
    r = await client.post("/api/v1/search", json={"statuses": ["failed"], "error": "*connectionreset*",
                                                  "limit": 4, "count": True})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["count"] == 6 and not body["count_capped"] and len(body["jobs"]) == 4
    assert all(j["queue"] == "qa" and j["status"] == "failed" for j in body["jobs"])
    assert body["jobs"][0]["error"].startswith("ConnectionResetError: x")
    r2 = await client.post("/api/v1/search", json={"statuses": ["failed"], "error": "*connectionreset*",
                                                   "cursor": body["next_cursor"]})
    assert [j["job_id"] for j in r2.json()["jobs"]] and r2.json()["next_cursor"] is None
    assert {j["job_id"] for j in body["jobs"]}.isdisjoint({j["job_id"] for j in r2.json()["jobs"]})
    assert len(body["jobs"]) + len(r2.json()["jobs"]) == 6
    r3 = await client.post("/api/v1/search", json={"queues": ["qb"], "statuses": ["failed", "succeeded"]})
    assert len(r3.json()["jobs"]) == 3


@pytest.mark.parametrize("body, code", [
    ({"statuses": ["nope"]}, 422),
    ({"statuses": []}, 422),
    ({"created_from": "2030-01-02T00:00:00Z", "created_to": "2030-01-01T00:00:00Z"}, 422),
    ({"args_path": "$.a ? (@ =="}, 422),
    ({"error": "a\u0000b"}, 422),
    ({"queues": ["x" * 300]}, 422),
    ({"args_contains": [1, 2]}, 422),
    ({"finished_from": "9999-12-31T23:00:00-05:00"}, 422),
    ({"limit": 0}, 422),
    ({"cursor": "garbage"}, 422),
    ({"surprise": 1}, 422),
])
async def test_bad_filters_are_4xx_in_the_error_shape(client, db, body, code):
    r = await client.post("/api/v1/search", json=body)
    assert r.status_code == code, r.text
    assert set(r.json()) >= {"error", "detail"}


async def test_the_group_runs_as_a_real_process(db, subprocess_env):
    """The group's one real `python -m dataloader ops` (the other CLI tests run in-process)."""
    await fill(db)
    found = ops_cli(subprocess_env, "search", "--status", "failed", "--queue", "qb", "--finished-from", "1h",
                    process=True)
    assert found.returncode == 0, found.stderr
    body = json.loads(found.stdout[found.stdout.index("{"):])
    assert body["count"] == 3 and {j["error"] for j in body["jobs"]} == {"KeyError: 'x'"}


async def test_cli_search_and_top_errors(db, cli_env):
    await db.execute("TRUNCATE dl_stats_state, dl_stats_hourly, dl_stats_hist, dl_stats_errors")
    await fill(db)
    found = ops_cli(cli_env, "search", "--status", "failed", "--queue", "qb", "--finished-from", "1h")
    assert found.returncode == 0, found.stderr
    body = json.loads(found.stdout[found.stdout.index("{"):])
    assert body["count"] == 3 and {j["error"] for j in body["jobs"]} == {"KeyError: 'x'"}
    bad = ops_cli(cli_env, "search", "--status", "bogus")
    assert bad.returncode == 2 and "status" in bad.stderr
    top = ops_cli({**cli_env, "DL_STATS_LAG_SEC": "0"}, "errors", "--hours", "2")
    assert top.returncode == 0, top.stderr
    groups = json.loads(top.stdout[top.stdout.index("{"):])["errors"]
    assert groups[0]["queue"] == "qa" and groups[0]["jobs"] == 6 and groups[0]["error"].startswith("ConnectionReset")


def counter(queue: str, task: str, action: str) -> float:
    return metrics.QUEUE_TIME_EXPIRIES.labels(queue, task, action)._value.get()


async def test_queue_time_checker_flags_once_and_fails_where_asked(db, dsn):
    # waiting 10 min (overdue), 1 min (not yet), and one in a queue that fails overdue jobs
    old = await add_job(db, queue="slow", status="queued", finished_ago=None, created_ago=600)
    fresh = await add_job(db, queue="slow", status="queued", finished_ago=None, created_ago=60)
    doomed = await add_job(db, queue="strict", status="queued", finished_ago=None, created_ago=600)
    settings = ops_settings(dsn, queue_time_limit_sec=300,
                            queue_time_limits_json={"strict": {"limit": "5m", "fail": True}})
    checker = QueueTimeChecker(QueueTimeRepository(db), QueueTimeSettings.from_settings(settings))
    before = counter("slow", "dl.noop", "flagged"), counter("strict", "dl.noop", "failed")
    assert await checker.tick() == 2
    assert await checker.tick() == 0  # a compare-and-set: never flagged or counted twice
    after = counter("slow", "dl.noop", "flagged"), counter("strict", "dl.noop", "failed")
    assert (after[0] - before[0], after[1] - before[1]) == (1, 1)
    rows = {r["job_id"]: r for r in await db.fetch("SELECT job_id, status::text, queue_overdue_at, error FROM dl_jobs")}
    assert rows[old]["status"] == "queued" and rows[old]["queue_overdue_at"] is not None
    assert rows[fresh]["queue_overdue_at"] is None
    assert rows[doomed]["status"] == "failed" and "queue time limit" in rows[doomed]["error"]
    kinds = await db.fetch("SELECT job_id, kind FROM dl_job_events WHERE kind IN ('queue_overdue', 'failed')")
    assert sorted((r["job_id"] == old, r["kind"]) for r in kinds) == [(False, "failed"), (True, "queue_overdue")]
    # runnable again after the flag (a retry sets available_at = now()), then overdue again:
    # flagged anew (as if the flag was 500 s and the retry 400 s ago)
    await db.execute("UPDATE dl_jobs SET queue_overdue_at = now() - interval '500 seconds', "
                     "available_at = now() - interval '400 seconds' WHERE job_id = $1", old)
    assert await checker.tick() == 1


async def test_lease_expiry_counter_per_queue_and_task(db):
    from dataloader.jobs.reaper import Reaper
    from dataloader.storage.repositories import JobRepository

    job = await add_job(db, queue="lq", status="running", finished_ago=None, picked_ago=120)
    await db.execute("UPDATE dl_jobs SET lease_expires_at = now() - interval '1 minute' WHERE job_id = $1", job)
    before = metrics.LEASE_EXPIRIES.labels("lq", "dl.noop")._value.get()
    assert await Reaper(JobRepository(db)).tick() == 1
    assert metrics.LEASE_EXPIRIES.labels("lq", "dl.noop")._value.get() - before == 1


async def test_http_operations_dry_run_start_pause_resume_cancel_events(client, db):
    await fill(db)
    operations_before = await db.fetchval("SELECT count(*) FROM dl_operations")
    dry = await client.post("/api/v1/operations", json={"kind": "requeue", "filter": {"statuses": ["failed"]},
                                                         "dry_run": True})
    assert dry.status_code == 200 and dry.json()["total"] == 9, dry.text
    assert await db.fetchval("SELECT count(*) FROM dl_operations") == operations_before
    made = await client.post("/api/v1/operations", json={"kind": "requeue", "filter": {"queues": ["qb"]},
                                                          "started_by": "alice", "batch_size": 2})
    assert made.status_code == 201, made.text
    op = made.json()
    assert (op["state"], op["total"], op["started_by"]) == ("running", 3, "alice")
    oid = op["operation_id"]
    paused = await client.post(f"/api/v1/operations/{oid}/pause", json={"actor": "bob"})
    assert paused.status_code == 200 and paused.json()["state"] == "paused"
    again = await client.post(f"/api/v1/operations/{oid}/pause")
    assert again.status_code == 409 and again.json()["error"] == "operation_state_conflict"
    assert (await client.post(f"/api/v1/operations/{oid}/resume")).json()["state"] == "running"
    assert (await client.post(f"/api/v1/operations/{oid}/cancel")).json()["state"] == "canceled"
    listed = (await client.get("/api/v1/operations", params={"state": "canceled"})).json()
    assert [o["operation_id"] for o in listed["operations"]] == [oid]
    trail = (await client.get(f"/api/v1/operations/{oid}/events")).json()
    assert [(e["kind"], e["actor"]) for e in trail] == [("created", "alice"), ("paused", "bob"), ("resumed", "api"),
                                                        ("canceled", "api")]
    missing = await client.get("/api/v1/operations/00000000-0000-0000-0000-000000000000")
    assert missing.status_code == 404 and missing.json()["error"] == "operation_not_found"


@pytest.mark.parametrize("body", [
    {"kind": "explode"},
    {"kind": "set_priority", "params": {"priority": -3}},
    {"kind": "requeue", "params": {"x": 1}},
    {"kind": "requeue", "filter": {"statuses": ["zzz"]}},
    {"kind": "requeue", "filter": {"args_path": "$$$"}},
    {"kind": "requeue", "batch_size": 0},
    {"kind": "requeue", "started_by": ""},
    {"kind": "requeue", "surprise": True},
])
async def test_bad_operation_requests_are_4xx_and_write_nothing(client, db, body):
    operations_before = await db.fetchval("SELECT count(*) FROM dl_operations")
    r = await client.post("/api/v1/operations", json=body)
    assert 400 <= r.status_code < 500 and set(r.json()) >= {"error", "detail"}, r.text
    assert await db.fetchval("SELECT count(*) FROM dl_operations") == operations_before


async def test_cli_bulk_dry_run_start_pause_abort_show_watch(db, cli_env):
    from dataloader.operations.runner import OperationRunner, OperationRunnerSettings
    from dataloader.storage.operation_repository import OperationRepository

    await fill(db)
    # other tests of this worker's database may have left operations: count what this one adds
    operations_before = await db.fetchval("SELECT count(*) FROM dl_operations")
    dry = ops_cli(cli_env, "requeue", "--status", "failed", "--queue", "qa", "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert json.loads(dry.stdout[dry.stdout.index("{"):])["total"] == 6
    assert await db.fetchval("SELECT count(*) FROM dl_operations") == operations_before
    refused = ops_cli(cli_env, "requeue", "--queue", "qa")  # asks first; no answer: nothing starts
    assert refused.returncode == 1 and "7 jobs match" in refused.stderr  # no status: the succeeded one too
    assert await db.fetchval("SELECT count(*) FROM dl_operations") == operations_before
    started = ops_cli(cli_env, "requeue", "--status", "failed", "--queue", "qa", "--yes", "--no-watch",
                      "--batch-size", "2")
    assert started.returncode == 0, started.stderr
    op = json.loads(started.stdout[started.stdout.index("{"):])
    assert (op["state"], op["total"], op["started_by"].startswith("cli")) == ("running", 6, True)
    oid = op["operation_id"]
    paused = ops_cli(cli_env, "pause", oid)
    assert json.loads(paused.stdout[paused.stdout.index("{"):])["state"] == "paused"
    assert ops_cli(cli_env, "resume", oid).returncode == 0
    # a runner (any node's; here in the test process) works it; `watch` then ends at once
    await OperationRunner(OperationRepository(db), OperationRunnerSettings(period_sec=1), owner="t").tick()
    watched = ops_cli(cli_env, "watch", oid)
    assert watched.returncode == 0 and "6/6" in watched.stderr, watched.stderr
    assert json.loads(watched.stdout[watched.stdout.index("{"):])["state"] == "finished"
    shown = ops_cli(cli_env, "show", oid)
    shown = json.loads(shown.stdout[shown.stdout.index("{"):])
    assert [e["kind"] for e in shown["events"]] == ["created", "paused", "resumed", "started", "finished"]
    aborted = ops_cli(cli_env, "abort", oid)
    assert aborted.returncode == 1 and "operation_state_conflict" in aborted.stderr
    listed = json.loads(ops_cli(cli_env, "list").stdout)
    assert [o["operation_id"] for o in listed] == [oid]
    assert ops_cli(cli_env, "show", "not-a-uuid").returncode == 2
