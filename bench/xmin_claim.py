"""Why the claim slows while another session holds the xmin horizon (issue 22; docs/scaling.md "A
queue table that stays healthy for months"): the claim statement's plan and buffers, captured.

    .venv/bin/python -m bench.xmin_claim [--jobs 20000] [--queued 50] [--concurrency 8]
                                         (BENCH_DSN, or an embedded server)

A node drains `--jobs` no-op jobs (enqueued in batches, claimed and finished by its workers) while
another session holds a REPEATABLE READ snapshot; autovacuum is off for dl_jobs so each state is
made on purpose. Then, with the node stopped and `--queued` fresh jobs waiting, the claim statement
(claim_jobs.sql, prepared as the worker prepares it) is run in transactions that are rolled back,
each state as a generic plan (what the worker's prepared statement ends up using) and a custom one:

  held            the snapshot still held, no vacuum since the drain;
  held+vacuum     VACUUM (ANALYZE) dl_jobs during the hold (it can remove nothing the drain left);
  released        the snapshot committed, no vacuum: the first claims mark index entries dead;
  released+vacuum VACUUM (ANALYZE) dl_jobs after the release.

Per state: the median of `--repeat` timed runs and one EXPLAIN (ANALYZE, BUFFERS) of each plan.
Writes bench/results/xmin-claim-<UTC>.json and prints a table and the plans' key lines.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import statistics
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import asyncpg

from bench.pg import fresh_database, start_server
from dataloader import App, Queue, Settings
from dataloader.storage.queue_connection import claim_sql

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
QUEUE = "xmin"
CLAIM_LIMIT = 8


async def drain(app: App, jobs: int) -> float:
    started = time.monotonic()
    async with app.running():
        for start in range(0, jobs, 500):
            await app.enqueue_many([{"task": "dl.noop", "queue": QUEUE} for _ in range(min(500, jobs - start))])
        conn = await asyncpg.connect(app.settings.db_dsn)
        deadline = time.monotonic() + 600
        try:
            while await conn.fetchval("SELECT count(*) FROM dl_jobs WHERE status <> 'succeeded'"):
                if time.monotonic() > deadline:
                    raise RuntimeError("the node did not drain in time")
                await asyncio.sleep(0.2)
        finally:
            await conn.close()
    return time.monotonic() - started


async def measure(conn: asyncpg.Connection, repeat: int) -> dict[str, Any]:
    """The claim, prepared, run `repeat` times per plan mode (each in a rolled-back transaction,
    its advisory locks released), then explained."""
    out: dict[str, Any] = {}
    for mode in ("force_generic_plan", "force_custom_plan"):
        await conn.execute(f"SET plan_cache_mode = {mode}")
        await conn.execute("DEALLOCATE ALL")
        await conn.execute(f"PREPARE claim(text, text) AS {claim_sql(CLAIM_LIMIT)}")
        times = []
        for _ in range(repeat):
            tx = conn.transaction()
            await tx.start()
            started = time.perf_counter()
            await conn.fetch(f"EXECUTE claim('{QUEUE}', 'bench')")
            times.append((time.perf_counter() - started) * 1000)
            await tx.rollback()
            await conn.execute("SELECT pg_advisory_unlock_all()")
        tx = conn.transaction()
        await tx.start()
        plan = [r[0] for r in await conn.fetch(
            f"EXPLAIN (ANALYZE, BUFFERS, COSTS OFF) EXECUTE claim('{QUEUE}', 'bench')")]
        await tx.rollback()
        await conn.execute("SELECT pg_advisory_unlock_all()")
        out[mode] = {"median_ms": round(statistics.median(times), 2), "first_ms": round(times[0], 2),
                     "max_ms": round(max(times), 2), "plan": plan, "walk": walk_lines(plan)}
    await conn.execute("RESET plan_cache_mode")
    return out


def walk_lines(plan: list[str]) -> list[str]:
    """The candidate walk's scan node and its buffers: where the time goes."""
    keep, take_next = [], 0
    for line in plan:
        if re.search(r"ix_dl_jobs_claim_order|SubPlan|Execution Time|Seq Scan on dl_jobs q", line):
            keep.append(line.strip())
            take_next = 4
        elif take_next:
            if re.search(r"Scan using|Buffers|Rows Removed|Index Cond|Filter|Heap Fetches", line):
                keep.append(line.strip())
            take_next -= 1
    return keep


async def main(args: argparse.Namespace) -> dict[str, Any]:
    server = start_server()
    out: dict[str, Any] = {"server": server.kind, "args": vars(args), "load_average_before": os.getloadavg(),
                           "states": {}}
    try:
        async with fresh_database(server, "xmin") as dsn:
            settings = Settings(db_dsn=dsn, workers=[Queue(QUEUE, args.concurrency)], retention_enabled=False,
                                stats_enabled=False, log_level="WARNING")
            app = App(settings)
            await app.open(migrate_schema=True)
            conn = await asyncpg.connect(dsn, statement_cache_size=0)  # DEALLOCATE ALL below
            holder = await asyncpg.connect(dsn)
            try:
                out["server_version"] = await conn.fetchval("SHOW server_version")
                await conn.execute("ALTER TABLE dl_jobs SET (autovacuum_enabled = false)")
                await holder.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
                await holder.fetchval("SELECT count(*) FROM dl_queue_flow")  # takes the snapshot
                out["drain_sec"] = round(await drain(app, args.jobs), 1)
                await app.enqueue_many([{"task": "dl.noop", "queue": QUEUE} for _ in range(args.queued)])

                async def state(name: str) -> None:
                    sizes = await conn.fetchrow(
                        "SELECT n_live_tup, n_dead_tup, pg_relation_size('ix_dl_jobs_claim_order') AS claim_index "
                        "FROM pg_stat_user_tables WHERE relname = 'dl_jobs'")
                    result = await measure(conn, args.repeat)
                    out["states"][name] = {**dict(sizes), **result}
                    print(f"{name:16} generic {result['force_generic_plan']['median_ms']:8.2f} ms   "
                          f"custom {result['force_custom_plan']['median_ms']:8.2f} ms   "
                          f"claim index {sizes['claim_index'] / 2**20:.2f} MB", flush=True)
                    for line in result["force_generic_plan"]["walk"]:
                        print(f"    {line}")

                await state("held")
                await conn.execute("VACUUM (ANALYZE) dl_jobs")
                await state("held+vacuum")
                await holder.execute("COMMIT")
                await state("released")
                await conn.execute("VACUUM (ANALYZE) dl_jobs")
                await state("released+vacuum")
            finally:
                await holder.close()
                await conn.close()
                await app.close()
    finally:
        server.stop()
    out["load_average_after"] = os.getloadavg()
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / f"xmin-claim-{datetime.now(UTC):%Y%m%dT%H%M%SZ}.json"
    path.write_text(json.dumps(out, indent=2, default=str) + "\n")
    out["file"] = str(path.relative_to(ROOT))
    return out


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=20000)
    parser.add_argument("--queued", type=int, default=50)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--repeat", type=int, default=15)
    result = asyncio.run(main(parser.parse_args()))
    print(result["file"])
