"""A hot lock_key ahead of everyone (issue 13): how much a claim costs when 100,000 queued jobs of
one busy lock_key come first in the claim order, against the same claim with only the 1,000 other
jobs queued. The claim's index scan walks every queued row of the busy key (each is excluded by
the `NOT EXISTS running` test) before it reaches the other keys.

    python -m bench.hot_key --dsn postgresql://postgres@127.0.0.1:5432/postgres [--hot 100000]

Each claim runs in a transaction that is rolled back, so every sample sees the same table. A fresh
database is made and dropped per run. Prints the median claim(8) time of both and the ratio (the
target is within 2x), and the claim's plan line that shows the walk.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
import uuid

import asyncpg

from bench.pg import with_database
from dataloader.storage import migrate
from dataloader.storage.queue_connection import claim_sql


async def _median_claim_ms(conn: asyncpg.Connection, samples: int) -> float:
    times = []
    for _ in range(samples):
        tr = conn.transaction()
        await tr.start()
        started = time.perf_counter()
        await conn.fetch(claim_sql(8), "q", "bench")
        times.append(time.perf_counter() - started)
        await tr.rollback()
        await conn.execute("SELECT pg_advisory_unlock_all()")
    return statistics.median(times) * 1000


async def _run(args: argparse.Namespace) -> dict[str, object]:
    name = f"dl_hotkey_{uuid.uuid4().hex[:8]}"
    admin = await asyncpg.connect(args.dsn)
    await admin.execute(f'CREATE DATABASE "{name}"')
    try:
        dsn = with_database(args.dsn, name)
        await migrate.upgrade(dsn)
        conn = await asyncpg.connect(dsn)
        try:
            await conn.execute("INSERT INTO dl_jobs (job_id, queue, task, lock_key, args) SELECT gen_random_uuid(), "
                               "'q', 'dl.noop', 'k' || g, '{}' FROM generate_series(1, $1) g", args.others)
            await conn.execute("ANALYZE dl_jobs")
            alone = await _median_claim_ms(conn, args.samples)
            await conn.execute(
                "INSERT INTO dl_jobs (job_id, queue, task, lock_key, args, status, attempt, started_at, "
                "lease_expires_at) VALUES (gen_random_uuid(), 'q', 'dl.noop', 'hot', '{}', 'running', 1, now(), "
                "now() + interval '1 hour')")
            await conn.execute(
                "INSERT INTO dl_jobs (job_id, queue, task, lock_key, args, created_at, available_at) "
                "SELECT gen_random_uuid(), 'q', 'dl.noop', 'hot', '{}', now() - interval '1 day', "
                "now() - interval '1 day' FROM generate_series(1, $1) g", args.hot)
            await conn.execute("ANALYZE dl_jobs")
            behind_hot = await _median_claim_ms(conn, args.samples)
            tr = conn.transaction()
            await tr.start()
            plan = [r[0] for r in await conn.fetch("EXPLAIN (ANALYZE, BUFFERS) " + claim_sql(8), "q", "bench")]
            await tr.rollback()
        finally:
            await conn.close()
    finally:
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        await admin.close()
    walk = next((line.strip() for line in plan if "ix_dl_jobs_claim_order" in line), None)
    return {"others": args.others, "hot": args.hot, "claim_ms_others_only": round(alone, 2),
            "claim_ms_behind_hot_key": round(behind_hot, 2), "ratio": round(behind_hot / alone, 1),
            "target_ratio": 2.0, "scan": walk}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dsn", default="postgresql://postgres@127.0.0.1:5432/postgres")
    parser.add_argument("--hot", type=int, default=100_000)
    parser.add_argument("--others", type=int, default=1_000)
    parser.add_argument("--samples", type=int, default=40)
    print(json.dumps(asyncio.run(_run(parser.parse_args())), indent=2))


if __name__ == "__main__":
    main()
