"""The scrape-time reads stay cheap whatever the store holds: on 40k failed jobs (100 of them held)
and 10k running ones (few past their lease), the job counts walk their partial indexes and never
the table, also as the generic plan a prepared statement may settle on."""

from __future__ import annotations

import pytest

from dataloader.storage.queries import sql
from tests.retention.test_explain import explain


@pytest.fixture
async def store(db):
    await db.execute(
        "INSERT INTO dl_jobs (job_id, queue, task, lock_key, status, attempt, created_at, available_at, "
        "started_at, finished_at, error, held_at) "
        "SELECT gen_random_uuid(), 'q' || (g % 10), 'dl.noop', g::text, 'failed', 1, now(), now(), now(), now(), "
        "'e', CASE WHEN g % 400 = 0 THEN now() END FROM generate_series(1, 40000) g")
    await db.execute(
        "INSERT INTO dl_jobs (job_id, queue, task, lock_key, status, attempt, created_at, available_at, "
        "started_at, lease_expires_at) "
        "SELECT gen_random_uuid(), 'q' || (g % 10), 'dl.noop', 'r' || g, 'running', 1, now(), now(), now(), "
        "now() + CASE WHEN g % 1000 = 0 THEN interval '-1 minute' ELSE interval '1 minute' END "
        "FROM generate_series(1, 10000) g")
    await db.execute("ANALYZE dl_jobs")
    yield db


@pytest.mark.parametrize("generic", [False, True])
async def test_job_alerts_walk_partial_indexes(store, generic):
    async with store.acquire() as conn:
        plan = await explain(conn, sql("health/job_alerts"), 10_000, generic=generic)
        rows = await conn.fetch(sql("health/job_alerts"), 10_000)
    seq = [n for n in plan if n["Node Type"] == "Seq Scan" and n.get("Relation Name") == "dl_jobs"]
    assert not seq, "a scrape would read every job"
    # an index scan names its index; a bitmap heap scan's index is on its Bitmap Index Scan child
    assert {n["Index Name"] for n in plan if "Index Name" in n} == {"ix_dl_jobs_running_lease", "ix_dl_jobs_held"}
    assert sum(r["jobs"] for r in rows if r["kind"] == "held") == 100
    assert sum(r["jobs"] for r in rows if r["kind"] == "lease_expired") == 10
