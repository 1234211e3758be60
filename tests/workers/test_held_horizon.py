"""The claim while another session holds the xmin horizon (issue 22; docs/scaling.md "A queue table
that stays healthy for months").

While a snapshot older than the last jobs' runs is open, no index entry of their old versions can be
removed or marked dead: ix_dl_jobs_running_lease and ix_dl_jobs_status_queue keep one entry per job
that ran since. A VACUUM (ANALYZE) then records 0 running rows, so both look empty to the planner,
and the claim's "does this lock_key run already?" probe was planned as a walk of one of them with a
filter on lock_key: every candidate of every claim read all those entries (bench/xmin_claim.py:
8,443 buffers and 11-40 ms per claim after 20,000 jobs instead of 483 and 1.4-3.8 ms). The probe
must stay an index condition on lock_key (ix_dl_jobs_key_live, 0045, 0046) in all three claims."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator

import asyncpg
import pytest

from dataloader.storage import migrate
from dataloader.storage.queue_connection import claim_limited_sql, claim_sql, fair_claim_sql
from tests.support.database import create_database, drop_database

pytestmark = pytest.mark.db

JOBS_RUN_DURING_THE_HOLD = 10_000
CLAIMS = {"claim": claim_sql(16), "claim_limited": claim_limited_sql(16), "claim_fair": fair_claim_sql(16)}
# the running-key probe's lock_key term as EXPLAIN prints it, wherever the planner put it
_PROBE = re.compile(r"(Index Cond|Filter): .*\block_key = \(q(_\d+)?\.lock_key \|\| ''::text\)")


@pytest.fixture
async def held_horizon(pg_server) -> AsyncIterator[str]:
    """A database where 10,000 jobs ran and finished while another session held its snapshot,
    vacuumed and analyzed during the hold (as autovacuum would), with 50 jobs queued."""
    url = await create_database(pg_server)
    holder = None
    try:
        await migrate.upgrade(url)
        conn = await asyncpg.connect(url)
        try:
            await conn.execute("ALTER TABLE dl_jobs SET (autovacuum_enabled = false)")
            await conn.execute(
                """INSERT INTO dl_jobs (job_id, queue, task, args, lock_key, partition_key, priority, available_at,
                                        max_attempts, lease_ttl_sec)
                   SELECT gen_random_uuid(), 'q', 't', '{}'::jsonb, 'key-' || g, '', 0,
                          now() - interval '1 hour' + g * interval '1 ms', 3, 60
                   FROM generate_series(1, $1) g""", JOBS_RUN_DURING_THE_HOLD)
            holder = await asyncpg.connect(url)
            await holder.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
            await holder.fetchval("SELECT count(*) FROM dl_jobs")  # takes the snapshot
            await conn.execute("UPDATE dl_jobs SET status = 'running', attempt = 1, started_at = now(), "
                               "heartbeat_at = now(), lease_expires_at = now() + interval '60 seconds'")
            await conn.execute("UPDATE dl_jobs SET status = 'succeeded', finished_at = now(), lease_expires_at = NULL")
            await conn.execute("VACUUM (ANALYZE) dl_jobs")
            await conn.execute(
                """INSERT INTO dl_jobs (job_id, queue, task, args, lock_key, partition_key, priority, max_attempts,
                                        lease_ttl_sec)
                   SELECT gen_random_uuid(), 'q', 't', '{}'::jsonb, 'new-' || g, '', 0, 3, 60
                   FROM generate_series(1, 50) g""")
            # what the fixture claims to build: an index the planner reads as empty that still holds
            # an entry per job run (the vacuum could remove none: the holder may still see them)
            reltuples, pages = await conn.fetchrow(
                "SELECT reltuples, pg_relation_size(oid) / 8192 FROM pg_class "
                "WHERE relname = 'ix_dl_jobs_running_lease'")
            assert reltuples == 0 and pages >= 10, (reltuples, pages)
        finally:
            await conn.close()
        yield url
    finally:
        if holder is not None:
            await holder.close()
        await drop_database(pg_server, url)


@pytest.mark.parametrize("name", CLAIMS)
async def test_the_running_key_probe_stays_on_the_lock_key_index_while_the_horizon_is_held(held_horizon, name):
    conn = await asyncpg.connect(held_horizon, server_settings={"plan_cache_mode": "force_generic_plan"})
    try:
        await conn.execute(f"PREPARE claim(text, text) AS {CLAIMS[name]}")
        plan = [r[0] for r in await conn.fetch("EXPLAIN (COSTS OFF) EXECUTE claim('q', 'w')")]
    finally:
        await conn.close()
    probes = [(plan[i - 1].strip(), line.strip()) for i, line in enumerate(plan) if _PROBE.search(line)]
    assert probes, "\n".join(plan)
    walks = [(scan, term) for scan, term in probes
             if not (term.startswith("Index Cond") and "ix_dl_jobs_key_live" in scan)]
    assert walks == [], "\n".join(plan)
