"""The pruner on a real PostgreSQL: what it deletes (finished jobs older than their age, with their
journal rows), what it never touches (unfinished jobs, younger ones), per-queue overrides, and
that it never makes a claim wait — beside real workers draining a queue."""

from __future__ import annotations

import asyncio

import asyncpg
import pytest

from dataloader import App, Queue, Settings
from dataloader.maintenance.service import Scope
from dataloader.retention.policy import RetentionPolicy
from dataloader.retention.pruner import Pruner, PrunerSettings, prune
from dataloader.storage.queries import sql
from tests.conftest import wait_until
from tests.retention.rows import add_job, exists

DAY = 86400.0


def settings(dsn: str, **extra: object) -> Settings:
    values: dict[str, object] = {"workers": [], "stats_enabled": False, **extra}
    return Settings(db_dsn=dsn, **values)


async def test_prune_deletes_old_finished_jobs_with_their_journal_and_nothing_else(db):
    old = {s: await add_job(db, status=s, finished_ago=40 * DAY, picked_ago=40 * DAY + 5)
           for s in ("succeeded", "canceled", "failed", "lost")}
    mid = {s: await add_job(db, status=s, finished_ago=10 * DAY, picked_ago=10 * DAY + 5)
           for s in ("succeeded", "canceled", "failed", "lost")}
    young = {s: await add_job(db, status=s, finished_ago=DAY) for s in ("succeeded", "failed")}
    # unfinished rows with ancient timestamps: never candidates whatever their times say
    queued = await add_job(db, status="queued", finished_ago=None, created_ago=400 * DAY)
    running = await add_job(db, status="running", finished_ago=None, picked_ago=400 * DAY, created_ago=400 * DAY)
    # a queued row with a finished_at: never a candidate either
    odd = await add_job(db, status="queued", finished_ago=50 * DAY, created_ago=400 * DAY)

    report = await prune(db, RetentionPolicy.from_settings(Settings()), batch_size=2)

    for status, job in old.items():
        assert await exists(db, job) == (False, 0), status
    assert await exists(db, mid["succeeded"]) == (False, 0) and await exists(db, mid["canceled"]) == (False, 0)
    assert await exists(db, mid["failed"]) == (True, 3) and await exists(db, mid["lost"]) == (True, 3)
    for job in (*young.values(), queued, running, odd):
        assert (await exists(db, job))[0]
    assert report.jobs[("q", "succeeded")] == 2 and report.jobs[("q", "failed")] == 1
    assert report.total == 6 and report.batches >= 4


async def test_dry_run_counts_and_deletes_nothing(db):
    for _ in range(3):
        await add_job(db, status="succeeded", finished_ago=8 * DAY)
    before = await db.fetchval("SELECT count(*) FROM dl_jobs")
    report = await prune(db, RetentionPolicy.from_settings(Settings()), dry_run=True)
    assert report.dry_run and report.jobs[("q", "succeeded")] == 3 and report.total == 3
    assert await db.fetchval("SELECT count(*) FROM dl_jobs") == before


async def test_per_queue_overrides(db):
    load_2d = await add_job(db, queue="load", status="succeeded", finished_ago=2 * DAY)
    other_2d = await add_job(db, queue="other", status="succeeded", finished_ago=2 * DAY)
    load_failed_40d = await add_job(db, queue="load", status="failed", finished_ago=40 * DAY)
    other_failed_40d = await add_job(db, queue="other", status="failed", finished_ago=40 * DAY)
    policy = RetentionPolicy.from_settings(Settings(
        retention_queues_json='{"load": {"succeeded": "1d", "failed": "90d"}}'))
    await prune(db, policy)
    assert not (await exists(db, load_2d))[0]
    assert (await exists(db, other_2d))[0]
    assert (await exists(db, load_failed_40d))[0]
    assert not (await exists(db, other_failed_40d))[0]


async def test_app_prune_older_than_and_statuses(dsn, db):
    job_failed = await add_job(db, status="failed", finished_ago=3 * 3600)
    job_ok = await add_job(db, status="succeeded", finished_ago=3 * 3600)
    async with App(settings(dsn)) as app:
        dry = await app.prune(older_than="2h", statuses=["failed"], dry_run=True)
        assert dry.to_dict()["pruned"] == [{"queue": "q", "status": "failed", "jobs": 1, "older_than_sec": 7200.0}]
        done = await app.prune(older_than="2h", statuses=["failed"])
        assert done.total == 1
        with pytest.raises(ValueError):
            await app.prune(older_than="2h", statuses=["queued"])
    assert not (await exists(db, job_failed))[0] and (await exists(db, job_ok))[0]


async def test_an_open_prune_batch_never_blocks_a_claim(dsn, db):
    """A prune batch holds its row locks until it commits; a worker must still claim and finish
    jobs meanwhile, and no session may wait on a lock."""
    for _ in range(50):
        await add_job(db, status="succeeded", finished_ago=30 * DAY)
    async with App(settings(dsn, workers=[Queue("q", concurrency=4)])) as app:
        conn: asyncpg.Connection = await asyncpg.connect(dsn)
        try:
            tx = conn.transaction()
            await tx.start()
            # the pruner's statement, its locks held by the open transaction
            assert await conn.fetchval(sql("retention/prune_batch"), "q", "succeeded", 7 * DAY, 1000) == 50
            async with app.running(reaper=False):
                jobs = [await app.enqueue("dl.noop", queue="q") for _ in range(20)]
                await wait_until(lambda: _all_succeeded(app, jobs), timeout=15, message="jobs to run")
                waiting = await db.fetchval(
                    "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                    "AND wait_event_type = 'Lock'")
                assert waiting == 0
            assert conn.is_in_transaction()  # the batch was open the whole time
            await tx.rollback()
        finally:
            await conn.close()


async def _all_succeeded(app: App, jobs) -> bool:
    statuses = [(await app.get(j.id)).status for j in jobs]
    return all(status == "succeeded" for status in statuses)


async def test_pruner_service_beside_a_running_drain(dsn, db, workers):
    """Real worker processes drain a queue while the leader's pruner deletes 20k old finished jobs
    in batches of 500: every new job finishes and stays, every old one goes with its journal."""
    await db.execute(
        "INSERT INTO dl_jobs (job_id, queue, task, lock_key, status, attempt, created_at, started_at, finished_at) "
        "SELECT gen_random_uuid(), 'drain', 'dl.noop', g::text, "
        "(ARRAY['succeeded','canceled','failed','lost'])[1 + g % 4]::dl_status, 1, "
        "now() - interval '60 days', now() - interval '60 days', now() - interval '40 days' "
        "FROM generate_series(1, 20000) g")
    # fresh statistics first: each journal row's foreign-key check must not run on a plan a pool
    # connection made for the near-empty table (seen once under xdist: this insert ran 17 minutes)
    await db.execute("ANALYZE dl_jobs")
    await db.execute("INSERT INTO dl_job_events (job_id, queue, kind) SELECT job_id, queue, 'picked' FROM dl_jobs")
    keep_failed = await add_job(db, queue="drain", status="failed", finished_ago=20 * DAY)
    w = workers(queues={"drain": 4}, stats_enabled="false", retention_enabled="false")
    await w.wait_ready()
    async with App(settings(dsn)) as producer:
        ids = await producer.enqueue_many([{"task": "dl.noop", "queue": "drain"} for _ in range(2000)])
        pruner = Pruner(db, RetentionPolicy.from_settings(Settings()),
                        PrunerSettings(period_sec=3600, batch_size=500, wait_for_stats=False))
        assert pruner.scope is Scope.LEADER
        report, _ = await asyncio.gather(
            pruner.tick(),
            wait_until(lambda: _finished(db, ids), timeout=60, message="the drain"))
    assert report.total == 20000 and report.batches >= 40
    assert await db.fetchval("SELECT count(*) FROM dl_jobs WHERE job_id = ANY($1) AND status = 'succeeded'",
                             ids) == 2000
    assert await db.fetchval("SELECT count(*) FROM dl_jobs WHERE finished_at < now() - interval '30 days'") == 0
    assert await db.fetchval("SELECT count(*) FROM dl_job_events e WHERE NOT EXISTS "
                             "(SELECT 1 FROM dl_jobs j WHERE j.job_id = e.job_id)") == 0
    assert (await exists(db, keep_failed))[0]


async def _finished(db, ids) -> bool:
    return await db.fetchval("SELECT count(*) FROM dl_jobs WHERE job_id = ANY($1) AND status = 'succeeded'",
                             ids) == len(ids)


async def test_pruner_runs_on_the_leader_of_app_running(dsn, db):
    old = await add_job(db, status="succeeded", finished_ago=8 * DAY)
    async with App(settings(dsn, workers=[Queue("q", concurrency=1)], retention_period_sec=3600)) as app:
        async with app.running() as manager:
            assert "pruner" in [s.name for s in manager.services_status()]
            await wait_until(lambda: manager.is_leader, timeout=10, message="leadership")
            await wait_until(lambda: _gone(db, old), timeout=10, message="the pruner's first tick")


async def _gone(db, job_id) -> bool:
    return not (await exists(db, job_id))[0]


async def test_the_process_feed_is_pruned_from_its_head_and_only_the_old_rows(db):
    """DL_RETENTION_PROCESS_FEED: feed rows older than the age go, batch by batch; younger ones and
    the processes' own history stay."""
    from dataloader.retention.pruner import prune_process_feed

    await db.execute("TRUNCATE dl_process_feed")
    await db.execute("INSERT INTO dl_process_feed (ns, process_id, kind, ts) "
                     "SELECT 'ns', 'p' || n, 'event', now() - interval '40 days' FROM generate_series(1, 25) n")
    await db.execute("INSERT INTO dl_process_feed (ns, process_id, kind, ts) "
                     "SELECT 'ns', 'young' || n, 'event', now() - interval '1 day' FROM generate_series(1, 5) n")
    assert await prune_process_feed(db, 30 * DAY, batch_size=10) == 25
    assert await db.fetchval("SELECT count(*) FROM dl_process_feed") == 5
    assert await prune_process_feed(db, 30 * DAY, batch_size=10) == 0
    assert await db.fetchval("SELECT count(*) FROM dl_process_feed WHERE process_id LIKE 'young%'") == 5


def test_the_feed_age_is_a_setting_with_durations():
    assert Settings(retention_process_feed="45d").retention_process_feed == 45 * DAY
    with pytest.raises(ValueError):
        Settings(retention_process_feed=60)


async def test_fair_shares_rows_of_idle_tenants_are_pruned_and_the_others_stay(db):
    """dl_queue_partitions (0024) keeps a row per tenant a fair queue served: a tenant with no
    queued job, last served over the idle age ago, loses it; one with a queued (or delayed) job, or
    served recently, keeps it; a parked-only tenant has no unparked queued job and goes."""
    from dataloader.retention.pruner import prune_fair_tenants
    from tests.support.engine import enqueue

    await db.execute("DELETE FROM dl_queue_partitions WHERE queue = 'fairq'")
    await db.execute("INSERT INTO dl_queue_partitions (queue, partition_key, served_at) "
                     "SELECT 'fairq', 'gone' || n, now() - interval '2 days' FROM generate_series(1, 25) n")
    await db.execute("INSERT INTO dl_queue_partitions (queue, partition_key, served_at) VALUES "
                     "('fairq', 'recent', now() - interval '1 hour'), ('fairq', 'waiting', now() - interval '2 days'),"
                     "('fairq', 'delayed', now() - interval '2 days')")
    await enqueue(db, "dl.noop", queue="fairq", partition_key="waiting")
    from datetime import UTC, datetime, timedelta
    await enqueue(db, "dl.noop", queue="fairq", partition_key="delayed",
                  available_at=datetime.now(UTC) + timedelta(hours=1))
    assert await prune_fair_tenants(db, DAY, batch_size=10) == 25
    assert await prune_fair_tenants(db, DAY, batch_size=10) == 0
    assert sorted(r["partition_key"] for r in await db.fetch(
        "SELECT partition_key FROM dl_queue_partitions WHERE queue = 'fairq'")) == ["delayed", "recent", "waiting"]
