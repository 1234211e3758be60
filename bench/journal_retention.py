"""The cost of retention (issue 39): deleting old jobs whose journal goes by ON DELETE CASCADE,
against dropping the journal's old partition first (retention/partitions.py) and then deleting
the jobs, for the same rows.

    .venv/bin/python -m bench.journal_retention [--jobs 400000] [--events 4] [--survivors 0.01]
                                                (BENCH_DSN, or an embedded server)

Per mode, a fresh database at head: a journal partition of a day that ended 8 days ago holds
`--jobs` succeeded jobs with `--events` journal rows each, plus `--survivors` x jobs failed in it
(kept 30 days: their rows must survive the drop). Then, measured from one session (its backend's
CPU from /proc when the server is local, WAL by pg_current_wal_lsn, dead tuples from the
statistics after a flush):

  delete  the pruner's batches (prune_batch.sql, 1000 jobs each), the journal by cascade;
  drop    the partition duty's drop (survivors copied into the DEFAULT partition), then the same
          pruner, whose cascade now finds nothing.

Writes bench/results/journal-retention-<UTC>.json and prints a table.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import asyncpg

from bench.pg import fresh_database, read_settings, start_server
from bench.procs import cpu_seconds
from dataloader import Settings
from dataloader.retention import partitions as parts
from dataloader.retention.policy import RetentionPolicy
from dataloader.retention.pruner import prune
from dataloader.storage import migrate

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"

FILL_JOBS = """
INSERT INTO dl_jobs (job_id, queue, task, lock_key, status, attempt, created_at, available_at, started_at, finished_at)
SELECT gen_random_uuid(), 'q', 'dl.noop', 'k' || g, $3::dl_status, 1, t, t, t, t + interval '1 second'
FROM generate_series(1, $1::int) AS g,
     LATERAL (SELECT $2::timestamptz + make_interval(secs => (g % 80000)::float8) AS t) AS x
"""
FILL_EVENTS = """
INSERT INTO dl_job_events (job_id, queue, kind, ts, payload)
SELECT j.job_id, j.queue, k.kind, j.created_at + make_interval(secs => k.n * 0.2), '{"attempt": 1}'::jsonb
FROM dl_jobs j,
     LATERAL (SELECT n, (ARRAY['queued', 'picked', 'progress', 'succeeded'])[1 + (n % 4)] AS kind
              FROM generate_series(0, $1::int - 1) AS n) AS k
"""
DEAD = """
SELECT COALESCE(sum(n_dead_tup) FILTER (WHERE relname = 'dl_jobs'), 0)::bigint AS jobs,
       COALESCE(sum(n_dead_tup) FILTER (WHERE relname LIKE 'dl_job_events%'), 0)::bigint AS journal
FROM pg_stat_all_tables WHERE schemaname = 'public'
"""


async def _old_partition(conn: asyncpg.Connection) -> parts.JournalPartition:
    """A range partition of a day that ended 8 days ago (the legacy one moved before it)."""
    end = parts.floor_boundary(datetime.now(UTC) - timedelta(days=8), parts.DAY)
    start = end - parts.DAY
    async with conn.transaction():
        await conn.execute("ALTER TABLE dl_job_events DETACH PARTITION dl_job_events_p_legacy")
        await conn.execute("ALTER TABLE dl_job_events ATTACH PARTITION dl_job_events_p_legacy "
                           f"FOR VALUES FROM (MINVALUE) TO ('{start.isoformat()}')")
    await conn.execute("SELECT dl_journal_attach_partition($1, $2, $3)", parts.partition_name(start, parts.DAY),
                       start, end)
    return parts.JournalPartition(parts.partition_name(start, parts.DAY), start, end)


async def measure(server: Any, mode: str, jobs: int, events: int, survivors: float) -> dict[str, Any]:
    async with fresh_database(server, f"jret_{mode}") as dsn:
        await migrate.upgrade(dsn)
        pool = await asyncpg.create_pool(dsn, min_size=1, max_size=1)
        try:
            async with pool.acquire() as conn:
                old = await _old_partition(conn)
                start = old.range_from or datetime.now(UTC)
                await conn.execute(FILL_JOBS, jobs, start, "succeeded")
                await conn.execute(FILL_JOBS.replace("'k' || g", "'f' || g"), int(jobs * survivors), start, "failed")
                await conn.execute(FILL_EVENTS, events)
                rows = await conn.fetchval("SELECT count(*) FROM dl_job_events")
                await conn.execute("VACUUM ANALYZE")
                await conn.execute("CHECKPOINT")
                pid = await conn.fetchval("SELECT pg_backend_pid()")
                await conn.execute("SELECT pg_stat_reset()")
                lsn0 = await conn.fetchval("SELECT pg_current_wal_lsn()")
            policy = RetentionPolicy.from_settings(Settings(db_dsn=dsn))
            cpu0 = cpu_seconds([pid]).get(pid) if server.local else None
            started = time.perf_counter()
            phases: dict[str, Any] = {}
            if mode == "drop":
                t = time.perf_counter()
                dropped = await parts.drop_due(pool, policy, datetime.now(UTC))
                phases["drop_sec"] = round(time.perf_counter() - t, 3)
                phases["dropped"] = [d.to_dict() for d in dropped]
                async with pool.acquire() as conn:
                    phases["journal_rows_of_pruned_jobs_left"] = await conn.fetchval(
                        "SELECT count(*) FROM dl_job_events e JOIN dl_jobs j USING (job_id) "
                        "WHERE j.status = 'succeeded'")
            t = time.perf_counter()
            report = await prune(pool, policy, batch_size=1000)
            phases["prune_sec"] = round(time.perf_counter() - t, 3)
            seconds = time.perf_counter() - started
            cpu1 = cpu_seconds([pid]).get(pid) if server.local else None
            async with pool.acquire() as conn:
                lsn1 = await conn.fetchval("SELECT pg_current_wal_lsn()")
                wal = await conn.fetchval("SELECT pg_wal_lsn_diff($1, $2)::bigint", lsn1, lsn0)
                await conn.execute("SELECT pg_stat_force_next_flush()")
                dead = dict(await conn.fetchrow(DEAD))
                left = await conn.fetchval("SELECT count(*) FROM dl_job_events")
            return {"mode": mode, "journal_rows": rows, "jobs_pruned": report.total, "seconds": round(seconds, 3),
                    "backend_cpu_sec": None if cpu0 is None or cpu1 is None else round(cpu1 - cpu0, 3),
                    "wal_bytes": wal, "dead_tuples": dead, "journal_rows_left": left, **phases}
        finally:
            await pool.close()


async def main(args: argparse.Namespace) -> dict[str, Any]:
    server = start_server()
    try:
        settings = await read_settings(server)
        runs = [await measure(server, mode, args.jobs, args.events, args.survivors) for mode in ("delete", "drop")]
    finally:
        server.stop()
    return {"server": settings, "jobs": args.jobs, "events": args.events, "survivors": args.survivors, "runs": runs}


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=400_000)
    parser.add_argument("--events", type=int, default=4)
    parser.add_argument("--survivors", type=float, default=0.01)
    result = asyncio.run(main(parser.parse_args()))
    RESULTS.mkdir(parents=True, exist_ok=True)
    out = RESULTS / f"journal-retention-{datetime.now(UTC):%Y%m%dT%H%M%SZ}.json"
    out.write_text(json.dumps(result, indent=2, default=str) + "\n")
    print(f"{'mode':8} {'journal rows':>12} {'jobs':>8} {'s':>8} {'CPU s':>7} {'WAL MB':>8} {'dead jobs':>10} "
          f"{'dead journal':>12}")
    for r in result["runs"]:
        print(f"{r['mode']:8} {r['journal_rows']:>12,} {r['jobs_pruned']:>8,} {r['seconds']:>8.2f} "
              f"{r['backend_cpu_sec'] if r['backend_cpu_sec'] is not None else '-':>7} {r['wal_bytes'] / 1e6:>8.1f} "
              f"{r['dead_tuples']['jobs']:>10,} {r['dead_tuples']['journal']:>12,}")
    print(f"bench: written to {out.relative_to(ROOT)}")
