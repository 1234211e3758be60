"""Every alert of deploy/prometheus/dataloader-alerts.yml fires when a real node is put in its
condition: the node's /metrics is scraped before and after, the samples go to `promtool test
rules` as series (tests/metrics/promtool.py says how), and promtool asserts the alert fired
with its labels. A healthy node's scrapes fire none of them."""

from __future__ import annotations

import asyncio
import re
import uuid

import asyncpg
import httpx
import pytest
import yaml

from dataloader.api import create_app
from dataloader.app import App
from tests.conftest import wait_until
from tests.metrics.conftest import QUEUE, Samples, obs_settings, parse, value
from tests.metrics.promtool import RULES, _series_name, alert_names, expect, rules, run_promtool
from tests.support.engine import enqueue

# promtool runs as a process of its own
pytestmark = pytest.mark.process


def test_the_rules_file_is_valid_and_every_alert_documents_itself():
    result = run_promtool("check", "rules", str(RULES))
    assert result.returncode == 0, result.stdout + result.stderr
    text = RULES.read_text()
    from tests.metrics.promtool import rules
    for rule in rules():
        assert rule["labels"]["severity"] in ("warning", "critical"), rule["alert"]
        assert rule["annotations"]["runbook"].startswith("docs/operations.md#"), rule["alert"]
        assert rule["annotations"]["summary"], rule["alert"]
        assert f"- alert: {rule['alert']}\n        # " in text, f"{rule['alert']}: say why its threshold"


async def _page(app: App) -> Samples:
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=create_app(app.settings, context=app)),
                                 base_url="http://dataloader.test") as client:
        response = await client.get("/metrics")
        assert response.status_code == 200
        return parse(response.text)


async def _job(app: App, queue: str, task: str = "dl.noop") -> uuid.UUID:
    return (await app.enqueue(task, {}, queue=queue)).job_id


async def _until_done(app: App, job_ids: list[uuid.UUID]) -> None:
    async def done() -> bool:
        return all([(await app.get(j)).status.value in ("succeeded", "failed") for j in job_ids])

    await wait_until(done, timeout=20, message="jobs to finish")


async def test_a_healthy_node_fires_nothing(obs_app, scrape, db, tmp_path):
    async with obs_app.running():
        # steady state: the node has started and taken the leadership (a once-only step, not a flap)
        async def steady() -> Samples | None:
            p = await scrape()
            return p if any(k[0] == "dl_leader_acquired_total" and v > 0 for k, v in p.items()) else None

        before = await wait_until(steady, message="the node to lead")
        await _until_done(obs_app, [await _job(obs_app, QUEUE) for _ in range(3)])
        after = await scrape()
    expect(before, after, {}, tmp_path, persists=False, silent=alert_names())


async def test_backlog_old(obs_app, scrape, db, tmp_path):
    job_id = await _job(obs_app, "backlog-q")
    await db.execute("UPDATE dl_jobs SET created_at = now() - interval '11 minutes' WHERE job_id = $1", job_id)
    page = await scrape()
    expect(page, page, {"DataloaderQueueBacklogOld": [{"queue": "backlog-q"}]}, tmp_path)


async def test_jobs_stuck_past_their_lease(obs_app, scrape, db, tmp_path):
    job_id = await _job(obs_app, "stuck-q")
    await db.execute("UPDATE dl_jobs SET status = 'running', started_at = now(), "
                     "lease_expires_at = now() - interval '3 minutes' WHERE job_id = $1", job_id)
    page = await scrape()
    expect(page, page, {"DataloaderJobsStuckPastLease": [{"queue": "stuck-q"}]}, tmp_path)


async def test_high_failure_ratio(obs_app, scrape, db, tmp_path):
    before = await scrape()
    async with obs_app.running():
        await _until_done(obs_app, [await _job(obs_app, QUEUE, "test.fatal"), await _job(obs_app, QUEUE)])
    after = await scrape()
    expect(before, after, {"DataloaderHighFailureRatio": [{"queue": QUEUE}]}, tmp_path)


async def test_held_jobs(obs_app, scrape, db, tmp_path):
    job_id = await _job(obs_app, "held-q")
    await db.execute("UPDATE dl_jobs SET status = 'failed', finished_at = now(), held_at = now(), "
                     "held_reason = 'exhausted' WHERE job_id = $1", job_id)
    page = await scrape()
    expect(page, page, {"DataloaderHeldJobs": [{"queue": "held-q"}]}, tmp_path)


async def test_processes_in_error(obs_app, scrape, db, tmp_path):
    ns = f"obs{uuid.uuid4().hex[:8]}"
    await db.execute("INSERT INTO dl_processes (ns, id, status) VALUES ($1, 'p1', 'error')", ns)
    try:
        page = await scrape()
    finally:
        await db.execute("DELETE FROM dl_processes WHERE ns = $1", ns)
    expect(page, page, {"DataloaderProcessesInError": [{"ns": ns}]}, tmp_path)


async def test_observers_waiting_for_capacity(obs_app, scrape, db, tmp_path):
    name = f"obs-{uuid.uuid4().hex[:8]}"
    await db.execute("INSERT INTO dl_observers (name, kind, restart_at) "
                     "VALUES ($1, 'no-room', now() - interval '6 minutes')", name)
    try:
        page = await scrape()
    finally:
        await db.execute("DELETE FROM dl_observers WHERE name = $1", name)
    expect(page, page, {"DataloaderObserversWaitingForCapacity": [{"kind": "no-room"}]}, tmp_path)


async def test_node_died(dsn, db, tmp_path):
    silent = uuid.uuid4()
    await db.execute("INSERT INTO dl_nodes (node_id, name, host, pid, version, heartbeat_at) "
                     "VALUES ($1, 'obs-silent', 'nowhere', 1, 'x', now() - interval '1 hour')", silent)
    app = await App(obs_settings(dsn, node_heartbeat_sec=0.2, node_dead_after_sec=4,
                                 observer_stop_grace_sec=1)).open()
    try:
        before = await _page(app)
        async with app.running():
            async def dead() -> bool:
                return await db.fetchval("SELECT state FROM dl_nodes WHERE node_id = $1", silent) == "dead"

            await wait_until(dead, message="the silent node declared dead")
            after = await _page(app)
    finally:
        await app.close()
        await db.execute("DELETE FROM dl_nodes WHERE node_id = $1", silent)
    expect(before, after, {"DataloaderNodeDied": [{}]}, tmp_path)


async def test_leader_flapping(obs_app, scrape, db, tmp_path):
    def acquired(page: Samples) -> float:
        return sum(v for k, v in page.items() if k[0] == "dl_leader_acquired_total")

    before = await scrape()
    for cycle in range(2):  # a node that loses its leadership and takes it again, twice
        want = acquired(before) + cycle + 1
        async with obs_app.running(queues=[]):
            async def led(want: float = want) -> bool:
                return acquired(await scrape()) >= want

            await wait_until(led, message="this node to become the leader")
    after = await scrape()
    expect(before, after, {"DataloaderLeaderFlapping": [{}]}, tmp_path)


async def test_reaper_returning_jobs(obs_app, scrape, db, tmp_path):
    ids = [await _job(obs_app, "reaped-q") for _ in range(6)]
    before = await scrape()
    await db.execute("UPDATE dl_jobs SET status = 'running', attempt = 1, started_at = now(), "
                     "lease_expires_at = now() - interval '1 minute' WHERE job_id = ANY($1)", ids)
    async with obs_app.running(queues=[]):  # only the reaper: the six go back to the queue
        async def reaped() -> bool:
            return (value(await scrape(), "dl_jobs_reaped_total", queue="reaped-q", outcome="queued") or 0) >= 6

        await wait_until(reaped, message="the reaper to take the six back")
    after = await scrape()
    expect(before, after, {"DataloaderReaperReturningJobs": [{"queue": "reaped-q"}]}, tmp_path)


# Takes most of the server's connections for a moment: alone when the workers share one server.
@pytest.mark.exclusive(when="shared_server")
async def test_connections_near_the_server_limit(obs_app, scrape, dsn, db, tmp_path):
    page = await scrape()
    limit = value(page, "dl_db_max_connections")
    used = sum(v for k, v in page.items() if k[0] == "dl_db_connections")
    needed = int(limit * 0.85) - int(used) + 1
    if needed > 200:
        pytest.skip(f"the server accepts {limit:g} connections: opening {needed} more for this test is too many")
    extra = await asyncio.gather(*[asyncpg.connect(dsn) for _ in range(max(needed, 0))])
    try:
        page = await scrape()
    finally:
        await asyncio.gather(*[c.close() for c in extra])
    assert sum(v for k, v in page.items() if k[0] == "dl_db_connections") / limit > 0.8
    expect(page, page, {"DataloaderConnectionsNearLimit": [{}]}, tmp_path)


async def test_connection_budget_over_the_server_limit(dsn, db, tmp_path):
    # A node whose pool may grow past what the server accepts (it opens connections only when used).
    app = await App(obs_settings(dsn, db_pool_extra=5000)).open()
    try:
        page = await _page(app)
    finally:
        await app.close()
    assert value(page, "dl_db_connections_budget") > value(page, "dl_db_max_connections")
    expect(page, page, {"DataloaderConnectionBudgetOverServerLimit": [{}]}, tmp_path)


async def test_xmin_horizon_held(obs_app, scrape, dsn, db, tmp_path):
    blocker = await asyncpg.connect(dsn, server_settings={"application_name": "obs-xmin-blocker"})
    try:
        await blocker.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
        await blocker.fetchval("SELECT count(*) FROM dl_jobs")

        async def held() -> Samples | None:
            p = await scrape()
            return p if (value(p, "dl_db_oldest_xmin_age_seconds") or 0) >= 1 else None

        page = await wait_until(held, message="the blocker's transaction to hold the horizon for 1 s")
    finally:
        await blocker.close()
    expect(page, page, {"DataloaderXminHorizonHeld": [{}]}, tmp_path)


async def test_dead_tuples_high(obs_app, scrape, db, tmp_path):
    job_id = await _job(obs_app, "held-q")
    # so none runs meanwhile; on the journal's partitions (0039), a partitioned table takes no storage parameter
    leaves = [r[0] for r in await db.fetch(
        "SELECT relid::regclass::text FROM pg_partition_tree('dl_job_events') WHERE isleaf")]
    for leaf in leaves:
        await db.execute(f"ALTER TABLE {leaf} SET (autovacuum_enabled = false)")
    try:
        async with db.acquire() as conn:
            await conn.execute("INSERT INTO dl_job_events (job_id, queue, kind) "
                               "SELECT $1, 'held-q', 'obs' FROM generate_series(1, 20000)", job_id)
            await conn.execute("DELETE FROM dl_job_events WHERE kind = 'obs'")
            await conn.execute("SELECT pg_stat_force_next_flush()")
            await conn.execute("SELECT 1")

        async def piled() -> Samples | None:
            p = await scrape()
            return p if (value(p, "dl_table_dead_tuples", table="dl_job_events") or 0) >= 20000 else None

        page = await wait_until(piled, message="20000 dead tuples reported")
    finally:
        for leaf in leaves:
            await db.execute(f"ALTER TABLE {leaf} RESET (autovacuum_enabled)")
        await db.execute("VACUUM dl_job_events")
    expect(page, page, {"DataloaderDeadTuplesHigh": [{"table": "dl_job_events"}]}, tmp_path)


async def test_metrics_cannot_read_the_database(obs_app, scrape, db, tmp_path):
    await obs_app.pool.close()  # as with a database that went away: every read of the scrape fails
    page = await scrape()
    expect(page, page, {"DataloaderMetricsDatabaseUnreachable": [{"instance": "node-a:8000"}]}, tmp_path)


def test_every_alert_has_a_test_that_makes_it_fire():
    import inspect
    import sys

    source = inspect.getsource(sys.modules[__name__])
    for name in alert_names():
        assert f'"{name}": [' in source, f"{name} has no test that makes it fire"


def _slug(heading: str) -> str:
    """GitHub's anchor of a Markdown heading."""
    return re.sub(r"[^a-z0-9 _-]", "", heading.strip().lower()).replace(" ", "-")


def test_every_runbook_anchor_exists_and_every_alert_is_documented():
    from tests.metrics.promtool import ROOT, rules

    operations = (ROOT / "docs" / "operations.md").read_text()
    anchors = {_slug(line.lstrip("#")) for line in operations.splitlines() if line.startswith("## ")}
    observability = (ROOT / "docs" / "observability.md").read_text()
    for rule in rules():
        anchor = rule["annotations"]["runbook"].split("#", 1)[1]
        assert anchor in anchors, f"{rule['alert']}: docs/operations.md has no section #{anchor}"
        assert f"| {rule['alert']} |" in observability, f"{rule['alert']} is not in docs/observability.md"


# -- DataloaderTablesGrowWithoutBacklog: a growth over 6 hours needs series of its own ---------------
# The scenarios above feed an hour in which a state persists. Here: every `dl_storage_table_bytes`
# and queued-count series a real node reports after a storage sample, then 8 hours in which one
# table grows by 20 MiB every 5 minutes (1.4 GiB in 6 h), in promtool's expanding notation (a+bxN).
# It fires when the backlog stays flat, not when the backlog grows with the table, nor in a steady
# state.

# 8 hours in 5-minute steps: enough for a 6-hour offset and the rule's 30 minutes, at a fifth of
# the evaluations of 1-minute steps (promtool evaluates every rule of the file at each step).
GROWTH_STEP = "5m"
GROWTH_STEPS = 96
GROWS = "DataloaderTablesGrowWithoutBacklog"
GROWTH_BYTES_PER_STEP = 20 * 1024 * 1024
# The tables whose real sizes are fed (all of them would only make promtool slower, not the test surer).
GROWTH_TABLES = ("dl_jobs", "dl_job_events", "dl_storage_samples")


async def _sampled_page(obs_app, db) -> Samples:
    await db.execute("TRUNCATE dl_storage_samples")
    await enqueue(db, "dl.noop", queue="storage-alert-q")
    await obs_app.health.sample_storage()
    transport = httpx.ASGITransport(app=create_app(obs_app.settings, context=obs_app))
    async with httpx.AsyncClient(transport=transport, base_url="http://node") as client:
        return parse((await client.get("/metrics")).text)


def _growth_series(page: Samples, *, table_grows: bool, backlog_grows: bool) -> list[dict[str, str]]:
    out = []
    for (name, labels), now in sorted(page.items()):
        if name == "dl_storage_table_bytes" and dict(labels)["table"] in GROWTH_TABLES:
            grows = table_grows and dict(labels) == {"table": "dl_job_events", "part": "heap"}
            step = GROWTH_BYTES_PER_STEP if grows else 0
        elif name == "dl_queue_jobs" and dict(labels).get("status") == "queued":
            step = 250 if backlog_grows else 0
        else:
            continue
        out.append({"series": _series_name(name, labels), "values": f"{now:g}+{step}x{GROWTH_STEPS - 1}"})
    assert any(s["series"].startswith("dl_storage_table_bytes") for s in out)
    assert any(s["series"].startswith("dl_queue_jobs") for s in out)
    return out


def _growth_test(series: list[dict[str, str]], fires: bool) -> dict:
    fired = {"DataloaderTablesGrowWithoutBacklog": [{}]} if fires else {}
    rule = next(r for r in rules() if r["alert"] == GROWS)
    expected = [{"exp_labels": {**labels, **rule["labels"]}, "exp_annotations": rule["annotations"]}
                for labels in fired.get(GROWS, [])]
    return {"interval": GROWTH_STEP, "input_series": series,
            "alert_rule_test": [{"eval_time": "7h50m", "alertname": GROWS, "exp_alerts": expected},
                                # before 6 h of history there is nothing to compare with
                                {"eval_time": "5h", "alertname": GROWS, "exp_alerts": []}]}


async def test_tables_grow_without_backlog(obs_app, db, tmp_path):
    page = await _sampled_page(obs_app, db)
    scenarios = [
        _growth_test(_growth_series(page, table_grows=True, backlog_grows=False), fires=True),  # bloat
        _growth_test(_growth_series(page, table_grows=True, backlog_grows=True), fires=False),  # load: work waiting
        _growth_test(_growth_series(page, table_grows=False, backlog_grows=False), fires=False),  # a steady state
    ]
    test_file = tmp_path / "storage_alert_test.yml"
    test_file.write_text(yaml.safe_dump({"rule_files": [str(RULES)], "evaluation_interval": GROWTH_STEP,
                                         "tests": scenarios}, sort_keys=False))
    result = run_promtool("test", "rules", str(test_file))
    assert result.returncode == 0, f"promtool test rules failed:\n{result.stdout}\n{result.stderr}"
