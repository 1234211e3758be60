"""Each metric an alert rule reads (deploy/prometheus/dataloader-alerts.yml): the system is put in
the state, and the real /metrics page shows it. The gauges read from the database at scrape time
also have to survive odd rows and a database that is away, and read the same on every node."""

from __future__ import annotations

import asyncio
import logging
import math
import uuid

import asyncpg
import httpx

from dataloader.api import create_app
from dataloader.app import App
from tests.conftest import wait_until
from tests.metrics.conftest import QUEUE, Samples, obs_settings, parse, value


async def _enqueue(app: App, db: asyncpg.Pool, *, queue: str = "held-q", task: str = "dl.noop") -> uuid.UUID:
    job = await app.enqueue(task, {}, queue=queue)
    return job.job_id


async def test_running_jobs_past_their_lease(obs_app, scrape, db):
    job_id = await _enqueue(obs_app, db, queue="stuck-q")
    assert value(await scrape(), "dl_jobs_lease_expired", queue="stuck-q") is None
    # what a node that died mid-attempt leaves when no reaper runs: running, lease ended 5 minutes ago
    await db.execute("UPDATE dl_jobs SET status = 'running', started_at = now() - interval '10 minutes', "
                     "lease_expires_at = now() - interval '5 minutes' WHERE job_id = $1", job_id)
    page = await scrape()
    assert value(page, "dl_jobs_lease_expired", queue="stuck-q") == 1
    assert 300 <= value(page, "dl_jobs_lease_expired_oldest_seconds", queue="stuck-q") < 400
    assert value(page, "dl_db_health_up", part="job_alerts") == 1


async def test_held_jobs(obs_app, scrape, db):
    job_id = await _enqueue(obs_app, db)
    await db.execute("UPDATE dl_jobs SET status = 'failed', finished_at = now(), held_at = now() - interval '1 hour', "
                     "held_reason = 'exhausted' WHERE job_id = $1", job_id)
    page = await scrape()
    assert value(page, "dl_jobs_held", queue="held-q") == 1
    assert 3600 <= value(page, "dl_jobs_held_oldest_seconds", queue="held-q") < 3700
    await db.execute("UPDATE dl_jobs SET held_at = NULL WHERE job_id = $1", job_id)  # released
    assert value(await scrape(), "dl_jobs_held", queue="held-q") is None


async def test_finished_outcomes_feed_the_failure_ratio(obs_app, scrape, db):
    def finished(page: Samples, task: str, outcome: str) -> float:
        return value(page, "dl_jobs_finished_total", queue=QUEUE, task=task, outcome=outcome) or 0.0

    before = await scrape()
    async with obs_app.running():
        failed = await obs_app.enqueue("test.fatal", {}, queue=QUEUE)
        ok = await obs_app.enqueue("dl.noop", {}, queue=QUEUE)

        async def both_done() -> bool:
            statuses = [(await obs_app.get(j.job_id)).status.value for j in (failed, ok)]
            return statuses == ["failed", "succeeded"]

        await wait_until(both_done, message="both jobs to finish")
    after = await scrape()
    assert finished(after, "test.fatal", "failed") == finished(before, "test.fatal", "failed") + 1
    assert finished(after, "dl.noop", "succeeded") == finished(before, "dl.noop", "succeeded") + 1


async def test_processes_in_error(obs_app, scrape, db):
    ns = f"obs{uuid.uuid4().hex[:8]}"
    await db.execute("INSERT INTO dl_processes (ns, id, status, detail) VALUES ($1, 'p1', 'error', 'boom'), "
                     "($1, 'p2', 'running', NULL)", ns)
    try:
        page = await scrape()
        assert value(page, "dl_processes", ns=ns, status="error") == 1
        assert value(page, "dl_processes", ns=ns, status="running") == 1
    finally:
        await db.execute("DELETE FROM dl_processes WHERE ns = $1", ns)


async def test_observers_waiting_for_capacity(obs_app, scrape, db):
    kind = f"obs-kind-{uuid.uuid4().hex[:6]}"
    name = f"obs-{uuid.uuid4().hex[:8]}"
    # due ten minutes ago, and no node in this test runs observers: it waits for capacity
    await db.execute("INSERT INTO dl_observers (name, kind, restart_at) VALUES ($1, $2, now() - interval '10 minutes')",
                     name, kind)
    try:
        page = await scrape()
        assert value(page, "dl_observers_waiting", kind=kind) == 1
        assert 600 <= value(page, "dl_observers_waiting_oldest_seconds", kind=kind) < 700
        await db.execute("UPDATE dl_observers SET desired = 'stop' WHERE name = $1", name)
        assert value(await scrape(), "dl_observers_waiting", kind=kind) is None
    finally:
        await db.execute("DELETE FROM dl_observers WHERE name = $1", name)


async def test_dead_nodes_live_nodes_and_leader_changes(dsn, db):
    # A node silent for an hour, registered as live: a running node's heartbeat declares it dead.
    silent = uuid.uuid4()
    await db.execute("INSERT INTO dl_nodes (node_id, name, host, pid, version, heartbeat_at) "
                     "VALUES ($1, 'obs-silent', 'nowhere', 1, 'x', now() - interval '1 hour')", silent)
    app = await App(obs_settings(dsn, node_heartbeat_sec=0.2, node_dead_after_sec=4, observer_stop_grace_sec=1)).open()
    try:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=create_app(app.settings, context=app)),
                                     base_url="http://dataloader.test") as client:
            async def page() -> Samples:
                return parse((await client.get("/metrics")).text)

            before = await page()
            async with app.running():
                async def dead_and_led() -> Samples | None:
                    p = await page()
                    dead = (value(p, "dl_nodes_marked_dead_total") or 0) > (
                        value(before, "dl_nodes_marked_dead_total") or 0)
                    led = any(k[0] == "dl_leader_acquired_total" and v > before.get(k, 0) for k, v in p.items())
                    return p if dead and led else None

                during = await wait_until(dead_and_led, message="the silent node declared dead and a leader")
                assert (value(during, "dl_nodes", state="live") or 0) >= 1
                assert await db.fetchval("SELECT state FROM dl_nodes WHERE node_id = $1", silent) == "dead"
    finally:
        await app.close()
        await db.execute("DELETE FROM dl_nodes WHERE node_id = $1", silent)


async def test_reaper_returns(obs_app, scrape, db):
    job_id = await _enqueue(obs_app, db, queue=QUEUE)
    await db.execute("UPDATE dl_jobs SET status = 'running', attempt = 1, started_at = now(), "
                     "lease_expires_at = now() - interval '1 minute' WHERE job_id = $1", job_id)
    before = value(await scrape(), "dl_jobs_reaped_total", queue=QUEUE, outcome="queued") or 0
    async with obs_app.running(queues=[]):  # the reaper only: the job goes back to the queue
        async def reaped() -> bool:
            return (value(await scrape(), "dl_jobs_reaped_total", queue=QUEUE, outcome="queued") or 0) > before

        await wait_until(reaped, message="the reaper to return the job")


async def test_connections_next_to_the_budget_and_the_server_limit(obs_app, scrape, db):
    page = await scrape()
    limit = int(await db.fetchval("SHOW max_connections")) - int(await db.fetchval(
        "SHOW superuser_reserved_connections"))
    assert value(page, "dl_db_max_connections") == limit
    assert value(page, "dl_db_connections_budget") == obs_app.pool.get_max_size()
    used = {k[1][0][1]: v for k, v in page.items() if k[0] == "dl_db_connections"}
    assert used.get("active", 0) >= 1  # the scrape's own statement
    assert sum(used.values()) >= 2  # and at least the test's own pool connection


async def test_oldest_xmin_age_and_the_warning_that_names_its_backend(obs_app, scrape, dsn, db, caplog):
    blocker = await asyncpg.connect(dsn, server_settings={"application_name": "obs-xmin-blocker"})
    try:
        pid = blocker.get_server_pid()
        await blocker.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
        await blocker.fetchval("SELECT count(*) FROM dl_jobs")  # holds its snapshot, so the horizon
        started = asyncio.get_running_loop().time()
        caplog.set_level(logging.WARNING, logger="dataloader.health")

        async def old_enough() -> Samples | None:
            p = await scrape()
            return p if (value(p, "dl_db_oldest_xmin_age_seconds") or 0) >= 1.5 else None

        page = await wait_until(old_enough, message="the blocker to pass 1.5 s")
        assert value(page, "dl_db_oldest_xmin_age_seconds") <= asyncio.get_running_loop().time() - started + 60
        assert value(page, "dl_db_oldest_xmin_age_xids") >= 0
        warnings = [r for r in caplog.records if r.name == "dataloader.health" and "xmin horizon" in r.getMessage()]
        assert len(warnings) == 1
        named = warnings[0]
        for field in ("pid", "application_name", "state", "xact_start", "query_start"):
            assert hasattr(named, field), field
        # It names the oldest holder: ours, unless the server has an older transaction of someone else.
        if named.pid != pid:
            assert named.xact_start <= await db.fetchval(
                "SELECT xact_start FROM pg_stat_activity WHERE pid = $1", pid)
        else:
            assert named.application_name == "obs-xmin-blocker" and named.state == "idle in transaction"
        await scrape()  # rate-limited: a second scrape right after writes no second line
        assert len([r for r in caplog.records if "xmin horizon" in r.getMessage()]) == 1
    finally:
        await blocker.close()


async def test_dead_tuples_and_last_vacuum_of_the_hot_tables(obs_app, scrape, db):
    job_id = await _enqueue(obs_app, db)
    async with db.acquire() as conn:
        await conn.execute("INSERT INTO dl_job_events (job_id, queue, kind, payload) "
                           "SELECT $1, 'held-q', 'obs', '{}'::jsonb FROM generate_series(1, 200)", job_id)
        await conn.execute("DELETE FROM dl_job_events WHERE kind = 'obs'")
        await conn.execute("SELECT pg_stat_force_next_flush()")  # PostgreSQL 15+: report now, not within 1 s
        await conn.execute("SELECT 1")

    async def dead() -> Samples | None:
        p = await scrape()
        return p if (value(p, "dl_table_dead_tuples", table="dl_job_events") or 0) >= 200 else None

    page = await wait_until(dead, message="200 dead tuples reported")
    assert value(page, "dl_table_live_tuples", table="dl_jobs") is not None
    await db.execute("VACUUM dl_job_events")

    async def vacuumed() -> Samples | None:
        p = await scrape()
        return p if value(p, "dl_table_last_vacuum_timestamp_seconds", table="dl_job_events") else None

    page = await wait_until(vacuumed, message="the manual VACUUM reported")
    assert (value(page, "dl_table_dead_tuples", table="dl_job_events") or 0) < 200


async def test_odd_rows_never_break_the_scrape(obs_app, scrape, db):
    a = await _enqueue(obs_app, db, queue="odd-q")
    b = await _enqueue(obs_app, db, queue="odd-q")
    await db.execute("UPDATE dl_jobs SET status = 'running', lease_expires_at = '-infinity' WHERE job_id = $1", a)
    await db.execute("UPDATE dl_jobs SET status = 'failed', held_at = 'infinity' WHERE job_id = $1", b)
    name = f"odd-{uuid.uuid4().hex[:8]}"
    await db.execute("INSERT INTO dl_observers (name, kind, restart_at) VALUES ($1, 'odd', '-infinity')", name)
    try:
        page = await scrape()
        for key in (("dl_jobs_lease_expired_oldest_seconds", "queue", "odd-q"),
                    ("dl_jobs_held_oldest_seconds", "queue", "odd-q"),
                    ("dl_observers_waiting_oldest_seconds", "kind", "odd")):
            got = value(page, key[0], **{key[1]: key[2]})
            assert got is not None and math.isfinite(got) and got >= 0, key
        assert all(value(page, "dl_db_health_up", part=p) == 1 for p in
                   ("job_alerts", "observers_waiting", "live_nodes", "connections", "oldest_xmin", "table_vacuum"))
    finally:
        await db.execute("DELETE FROM dl_observers WHERE name = $1", name)


async def test_a_database_that_is_away_leaves_the_health_out_not_the_scrape(obs_app, scrape, db):
    # Every connection of the App's pool is closed under it: the next reads need a reconnect,
    # which a closed pool cannot do, as with a database that went away.
    await obs_app.pool.close()
    page = await scrape()
    assert value(page, "dl_db_health_up", part="connections") == 0
    assert value(page, "dl_queue_stats_up") == 0
    assert value(page, "dl_db_connections_budget") is not None  # this node's own number needs no database
    assert not any(k[0] == "dl_jobs_held" for k in page)


async def test_every_node_reports_the_same_database_numbers(obs_app, scrape, dsn, db):
    job_id = await _enqueue(obs_app, db)
    await db.execute("UPDATE dl_jobs SET status = 'failed', held_at = '2020-01-01' WHERE job_id = $1", job_id)
    other = await App(obs_settings(dsn)).open()
    try:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=create_app(other.settings, context=other)),
                                     base_url="http://dataloader.test") as client:
            mine, theirs = await scrape(), parse((await client.get("/metrics")).text)
    finally:
        await other.close()
    for name in ("dl_jobs_held", "dl_db_max_connections", "dl_nodes"):
        assert {k: v for k, v in mine.items() if k[0] == name} == {k: v for k, v in theirs.items() if k[0] == name}
