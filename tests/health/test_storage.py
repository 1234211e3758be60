"""The storage of the queue's tables on a real PostgreSQL (health/storage.py): a sample has every
table we own with sizes that add up to PostgreSQL's own total, dead tuples that grow after a
delete, the sampler keeps only DL_STORAGE_SAMPLE_KEEP, /metrics shows the newest sample, and the
report's changes over 1 h / 6 h / 24 h are the newest total minus an old enough one."""

from __future__ import annotations

from datetime import UTC, datetime

import httpx
import pytest

from dataloader import App, Settings
from dataloader.api import create_app
from dataloader.health.storage import StorageSampler, StorageSettings, storage_report
from dataloader.storage.health_repository import HealthRepository
from tests.conftest import wait_until
from tests.support.engine import enqueue


@pytest.fixture
async def app(db, dsn):
    await db.execute("TRUNCATE dl_storage_samples")
    async with App(Settings(db_dsn=dsn, workers=[])) as app:
        yield app


async def test_a_sample_covers_our_tables_and_adds_up(app, db):
    await enqueue(db, "dl.noop", queue="storage-q", args={"blob": "x" * 5000})
    report = await app.health.sample_storage()
    names = {t.table for t in report.tables}
    assert {"dl_jobs", "dl_job_events", "dl_storage_samples", "dl_nodes"} <= names
    assert not {n for n in names if not n.startswith("dl_")}
    jobs = next(t for t in report.tables if t.table == "dl_jobs")
    assert jobs.total_bytes == await db.fetchval("SELECT pg_total_relation_size('dl_jobs')")
    assert jobs.heap_bytes > 0 and jobs.index_bytes > 0
    assert report.sampled_at is not None and abs((datetime.now(UTC) - report.sampled_at).total_seconds()) < 60
    assert report.tables == sorted(report.tables, key=lambda t: (-t.total_bytes, t.table))


async def test_dead_tuples_grow_after_a_delete(app, db):
    job = await enqueue(db, "dl.noop", queue="storage-q")
    # none runs meanwhile; on the journal's partitions (0039): a partitioned table takes no storage parameter
    leaves = [r[0] for r in await db.fetch(
        "SELECT relid::regclass::text FROM pg_partition_tree('dl_job_events') WHERE isleaf")]
    for leaf in leaves:
        await db.execute(f"ALTER TABLE {leaf} SET (autovacuum_enabled = false)")
    try:
        before = next(t for t in (await app.health.sample_storage()).tables if t.table == "dl_job_events")
        async with db.acquire() as conn:
            await conn.execute("INSERT INTO dl_job_events (job_id, queue, kind) "
                               "SELECT $1, 'storage-q', 'bulk' FROM generate_series(1, 5000)", job)
            await conn.execute("DELETE FROM dl_job_events WHERE kind = 'bulk'")
            await conn.execute("SELECT pg_stat_force_next_flush()")
            await conn.execute("SELECT 1")  # the flush happens at the end of a statement

        async def grown() -> int | None:
            now = next(t for t in (await app.health.sample_storage()).tables if t.table == "dl_job_events")
            return now.dead_tuples if now.dead_tuples >= before.dead_tuples + 5000 else None

        await wait_until(grown, timeout=10, message="the 5000 deleted rows counted as dead tuples")
    finally:
        for leaf in leaves:
            await db.execute(f"ALTER TABLE {leaf} RESET (autovacuum_enabled)")
        await db.execute("VACUUM dl_job_events")


async def test_the_sampler_keeps_only_its_window_and_metrics_show_the_newest(app, db):
    await db.execute("INSERT INTO dl_storage_samples VALUES (now() - interval '8 days', 'dl_jobs', 1, 1, 1, 0, 0, "
                     "NULL, NULL)")
    sampler = StorageSampler(HealthRepository(app.pool), StorageSettings(keep_sec=7 * 86400))
    assert sampler.scope.value == "leader"
    assert await sampler.tick() >= 2
    old = await db.fetchval("SELECT count(*) FROM dl_storage_samples WHERE sampled_at < now() - interval '7 days'")
    assert old == 0
    report = await app.health.storage()
    transport = httpx.ASGITransport(app=create_app(app.settings, context=app))
    async with httpx.AsyncClient(transport=transport, base_url="http://node") as client:
        page = (await client.get("/metrics")).text
    jobs = next(t for t in report.tables if t.table == "dl_jobs")
    assert f'dl_storage_table_bytes{{part="heap",table="dl_jobs"}} {float(jobs.heap_bytes)}' in page
    assert f'dl_storage_dead_tuples{{table="dl_jobs"}} {float(jobs.dead_tuples)}' in page
    assert 'dl_db_health_up{part="storage"} 1.0' in page
    assert "dl_storage_sample_timestamp_seconds " in page


def test_changes_are_the_newest_total_minus_an_old_enough_sample():
    now = datetime(2026, 5, 1, 12, tzinfo=UTC).timestamp()
    latest = [{"table": "dl_jobs", "heap_bytes": 700, "index_bytes": 200, "toast_bytes": 100, "live_tuples": 5,
               "dead_tuples": 1, "sampled_at": now, "last_autovacuum": None, "last_autoanalyze": now - 60}]
    trend = [{"table": "dl_jobs", "sampled_at": datetime.fromtimestamp(now - hours * 3600, UTC), "total_bytes": total}
             for hours, total in ((30, 100), (7, 400), (2, 900), (0, 1000))]
    report = storage_report(latest, trend, {"kind": "backend", "pid": 7, "application_name": "psql", "state": "idle",
                                            "age_sec": 12.34, "max_xid_age": 9})
    (jobs,) = report.tables
    assert jobs.total_bytes == 1000 and jobs.changes == {"1h": 100, "6h": 600, "24h": 900}
    assert jobs.trend == [100, 400, 900, 1000] and jobs.last_autovacuum is None
    assert report.oldest_xmin == {"kind": "backend", "pid": 7, "application_name": "psql", "state": "idle",
                                  "age_sec": 12.3, "xid_age": 9}
    young = storage_report(latest, trend[-1:], None)
    assert young.tables[0].changes == {"1h": None, "6h": None, "24h": None} and young.oldest_xmin is None
    assert storage_report([], [], None).sampled_at is None


async def test_the_console_storage_page(app, db):
    transport = httpx.ASGITransport(app=create_app(app.settings, context=app))
    async with httpx.AsyncClient(transport=transport, base_url="http://console") as client:
        empty = await client.get("/ui/storage")
        assert empty.status_code == 200 and "No storage sample yet" in empty.text
        await app.health.sample_storage()
        page = await client.get("/ui/storage")
    assert page.status_code == 200
    assert 'data-table="dl_jobs"' in page.text and 'data-table="dl_job_events"' in page.text
    assert 'id="storage-xmin"' in page.text and 'href="/ui/storage"' in page.text  # in the navigation


def test_sizes_and_sparklines_read_as_an_operator_reads_them():
    from dataloader.ui.pages.storage import SPARK_HEIGHT, size, spark

    assert [size(n) for n in (0, 512, 8192, -3 * 1024**3, 5 * 1024**5, None)] == [
        "0 B", "512 B", "8.0 KiB", "-3.0 GiB", "5120.0 TiB", "—"]
    assert size(8192, change=True) == "+8.0 KiB" and size(0, change=True) == "0 B"
    assert spark([5]) == "" and spark([1, 1]).count(",") == 2
    points = [tuple(map(float, p.split(","))) for p in spark([0, 10, 5]).split()]
    assert points[0][0] == 0 and points[1][1] == 1.0 and points[0][1] == SPARK_HEIGHT - 1


async def test_http_and_cli_read_the_same_report(app, db, cli_env):
    import asyncio
    import json

    from tests.support.cli import invoke

    result = await asyncio.to_thread(invoke, ["db", "storage", "--sample"], cli_env)
    assert result.exit_code == 0, result.output
    by_cli = json.loads(result.stdout)
    transport = httpx.ASGITransport(app=create_app(app.settings, context=app))
    async with httpx.AsyncClient(transport=transport, base_url="http://node") as client:
        answer = await client.get("/api/v1/storage")
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert body["sampled_at"] is not None and body["tables"]
    python = (await app.health.storage()).to_dict()
    assert {t["table"] for t in body["tables"]} == {t["table"] for t in python["tables"]} \
        == {t["table"] for t in by_cli["tables"]}
    jobs = next(t for t in body["tables"] if t["table"] == "dl_jobs")
    assert jobs["total_bytes"] == jobs["heap_bytes"] + jobs["index_bytes"] + jobs["toast_bytes"]
