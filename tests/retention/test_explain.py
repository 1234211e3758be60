"""Plan shape (not wall time) of the prune batch and the stats reads on a realistic table: 200k
finished jobs over 20 queues, 20k queued ones, and a year of hourly rollup rows."""

from __future__ import annotations

import json

import pytest

from dataloader.retention.stats import BOUNDS
from dataloader.storage.queries import sql


@pytest.fixture
async def big(db):
    await db.execute("TRUNCATE dl_stats_state, dl_stats_hourly, dl_stats_hist, dl_stats_errors")
    await db.execute(
        "INSERT INTO dl_jobs (job_id, queue, task, lock_key, status, attempt, created_at, available_at, "
        "started_at, finished_at, error) "
        "SELECT gen_random_uuid(), 'q' || (g % 20), 'dl.noop', g::text, "
        "(ARRAY['succeeded','canceled','failed','lost'])[1 + g % 4]::dl_status, 1, "
        "now() - make_interval(secs => g * 13), now() - make_interval(secs => g * 13), "
        "now() - make_interval(secs => g * 13), now() - make_interval(secs => g * 13 - 5), 'e' || (g % 7) "
        "FROM generate_series(1, 200000) g")
    await db.execute(
        "INSERT INTO dl_jobs (job_id, queue, task, lock_key, status, created_at, available_at) "
        "SELECT gen_random_uuid(), 'q' || (g % 20), 'dl.noop', g::text, 'queued', now(), now() "
        "FROM generate_series(1, 20000) g")
    # fresh statistics first: each journal row's foreign-key check must not run on a plan a pool
    # connection made for the near-empty table (seen once under xdist: this insert ran 17 minutes)
    await db.execute("ANALYZE dl_jobs")
    await db.execute("INSERT INTO dl_job_events (job_id, queue, kind) SELECT job_id, queue, 'picked' FROM dl_jobs")
    await db.execute(
        "INSERT INTO dl_stats_hourly (hour, queue, status, jobs) "
        "SELECT date_trunc('hour', now()) - make_interval(hours => h), 'q' || q, s, 1 "
        "FROM generate_series(0, 24 * 365) h, generate_series(0, 4) q, "
        "unnest(ARRAY['succeeded', 'failed']) s")
    await db.execute("ANALYZE dl_jobs; ANALYZE dl_stats_hourly; ANALYZE dl_job_events")
    yield db


def nodes(plan: dict) -> list[dict]:
    found = [plan]
    for child in plan.get("Plans", []):
        found.extend(nodes(child))
    return found


async def explain(conn, query: str, *args: object, generic: bool = False) -> list[dict]:
    if generic:  # the plan a prepared statement may settle on after five runs
        await conn.execute("SET plan_cache_mode = force_generic_plan")
    try:
        raw = await conn.fetchval("EXPLAIN (FORMAT JSON) " + query, *args)
    finally:
        await conn.execute("RESET plan_cache_mode")
    data = json.loads(raw) if isinstance(raw, str) else raw  # the pool decodes json already
    return nodes(data[0]["Plan"])


def scans_of(plan: list[dict], table: str) -> list[tuple[str, str | None]]:
    """The scans of `table`; of the journal, those of its partitions (0039)."""
    return [(n["Node Type"], n.get("Index Name")) for n in plan
            if n.get("Relation Name") == table or (table == "dl_job_events"
                                                   and str(n.get("Relation Name", "")).startswith("dl_job_events_"))]


@pytest.mark.slow  # a realistic table to insert and analyze
async def test_plans_on_a_realistic_table(big):
    """One fixture build (~200k rows) for every plan: the prune batch (custom and generic plan),
    the rollup, the stats reads and the loose scan of queues."""
    async with big.acquire() as conn:
        for generic in (False, True):
            plan = await explain(conn, sql("retention/prune_batch"), "q0", "succeeded", 7 * 86400.0, 1000,
                                 generic=generic)
            # the candidates come from one range of ix_dl_jobs_finished (an ordered index scan, or
            # a bitmap of that range when the planner expects few rows); the delete goes by pkey
            finished = [n for n in plan if n.get("Index Name") == "ix_dl_jobs_finished"]
            assert finished and all("finished_at <" in n["Index Cond"] for n in finished), (generic, plan)
            assert not any(n["Node Type"] == "Seq Scan" for n in plan), (generic, plan)
            assert {n.get("Index Name") for n in plan if n.get("Relation Name") == "dl_jobs"} <= {
                None, "ix_dl_jobs_finished", "dl_jobs_pkey"}, generic

        plan = await explain(conn, sql("stats/rollup"), _ago(3600), _ago(0), list(BOUNDS))
        # an index (only) scan of ix_dl_jobs_finished, or a bitmap heap scan fed by one (a Bitmap
        # Index Scan node names its index but not its table): never a sequential scan of dl_jobs
        dl_jobs = scans_of(plan, "dl_jobs")
        assert dl_jobs and not any(kind == "Seq Scan" for kind, _ in dl_jobs), dl_jobs
        job_indexes = {n["Index Name"] for n in plan
                       if n.get("Index Name", "").startswith(("ix_dl_jobs", "dl_jobs_"))}
        assert job_indexes == {"ix_dl_jobs_finished"}, plan
        events = scans_of(plan, "dl_job_events")
        # each partition's copy of ix_dl_job_events_job (0039)
        job_index = {r[0] for r in await conn.fetch(
            "SELECT relid::regclass::text FROM pg_partition_tree('ix_dl_job_events_job')")}
        assert events and all(index in job_index for _, index in events), events

        hourly = await explain(conn, sql("stats/read_hourly"), "q1", _ago(86400), _ago(0))
        oldest = await explain(conn, sql("stats/oldest_waiting"), None)
        queues = await explain(conn, sql("retention/finished_queues"))
    assert all(kind != "Seq Scan" for kind, _ in scans_of(hourly, "dl_stats_hourly")), hourly
    assert {index for _, index in scans_of(oldest, "dl_jobs")} <= {"ix_dl_jobs_claim", "ix_dl_jobs_claim_order"}
    assert {index for _, index in scans_of(queues, "dl_jobs")} == {"ix_dl_jobs_finished"}


def _ago(seconds: float):
    from datetime import UTC, datetime, timedelta

    return datetime.now(UTC) - timedelta(seconds=seconds)
