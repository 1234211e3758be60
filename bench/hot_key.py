"""A hot lock_key ahead of everyone (issue 13): how much a claim costs when 100,000 queued jobs of
one busy lock_key come first in the claim order, against the same claim with only the 1,000 other
jobs queued.

    python -m bench.hot_key --dsn postgresql://postgres@127.0.0.1:5432/postgres [--hot 100000]

The hot key is taken the way a worker takes it: a "holder" connection claims its head with the
engine's claim (so the claim's key_backlog flag is what a worker would see) and keeps it running.
Then claim(8) of the other keys is timed three times: before the holder parks the backlog (the
walk of every queued row of the hot key, as before migration 0017), right after the holder parked
it with the worker's statement (park_key_waiters.sql, batches of 2,000; the old index entries of
the parked rows are dead but not yet vacuumed), and after VACUUM ANALYZE (what autovacuum does
after so many updates). The holder's finish is timed too (its first call, so it includes the
statement's preparation). Each claim runs in a transaction that is rolled back, so every sample
sees the same table. A fresh database is made and dropped per run. Prints the medians, the ratios
to the claim with only the other keys (the target is within 2x) and the claim's index scan line of each shape.
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
from dataloader.storage.queue_connection import FinishRequest, QueueConnection, claim_sql


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


async def _plan_line(conn: asyncpg.Connection) -> str | None:
    tr = conn.transaction()
    await tr.start()
    plan = [r[0] for r in await conn.fetch("EXPLAIN (ANALYZE, BUFFERS) " + claim_sql(8), "q", "bench")]
    await tr.rollback()
    await conn.execute("SELECT pg_advisory_unlock_all()")
    return next((line.strip() for line in plan if "ix_dl_jobs_claim_order" in line), None)


async def _run(args: argparse.Namespace) -> dict[str, object]:
    name = f"dl_hotkey_{uuid.uuid4().hex[:8]}"
    admin = await asyncpg.connect(args.dsn)
    await admin.execute(f'CREATE DATABASE "{name}"')
    result: dict[str, object] = {"others": args.others, "hot": args.hot, "target_ratio": 2.0}
    try:
        dsn = with_database(args.dsn, name)
        await migrate.upgrade(dsn)
        conn = await asyncpg.connect(dsn)
        holder = await asyncpg.connect(dsn)
        try:
            await conn.execute("INSERT INTO dl_jobs (job_id, queue, task, lock_key, args) SELECT gen_random_uuid(), "
                               "'q', 'dl.noop', 'k' || g, '{}' FROM generate_series(1, $1) g", args.others)
            await conn.execute("ANALYZE dl_jobs")
            alone = await _median_claim_ms(conn, args.samples)
            # the hot key's jobs are a day old: first in the claim order
            await conn.execute(
                "INSERT INTO dl_jobs (job_id, queue, task, lock_key, args, created_at, available_at) "
                "SELECT gen_random_uuid(), 'q', 'dl.noop', 'hot', '{}', now() - interval '1 day' + g * interval '1 ms',"
                " now() - interval '1 day' + g * interval '1 ms' FROM generate_series(0, $1) g", args.hot)
            await conn.execute("ANALYZE dl_jobs")
            taken = await QueueConnection(holder).claim("q", "holder", 1)
            head = taken.claimed[0]
            assert head.lock_key == "hot" and head.key_backlog, taken
            unparked = await _median_claim_ms(conn, args.samples)
            scan_unparked = await _plan_line(conn)
            started = time.perf_counter()
            batches = 0
            while True:
                batches += 1
                if await QueueConnection(holder).park_key_waiters(head.job_id, head.attempt, 2000) < 2000:
                    break
            park_sec = time.perf_counter() - started
            parked = await _median_claim_ms(conn, args.samples)
            scan_parked = await _plan_line(conn)
            await conn.execute("VACUUM ANALYZE dl_jobs")
            vacuumed = await _median_claim_ms(conn, args.samples)
            scan_vacuumed = await _plan_line(conn)
            # the holder's finish unparks exactly the next job of the key, in order
            started = time.perf_counter()
            await QueueConnection(holder).finish_one(FinishRequest(
                job_id=head.job_id, attempt=head.attempt, outcome="succeeded", lock_key="hot", unlock=True))
            finish_ms = (time.perf_counter() - started) * 1000
            next_rows = await conn.fetch("SELECT created_at FROM dl_jobs WHERE lock_key = 'hot' AND status = 'queued' "
                                         "AND NOT key_parked")
        finally:
            await conn.close()
            await holder.close()
    finally:
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        await admin.close()
    result.update({
        "claim_ms_others_only": round(alone, 2),
        "claim_ms_behind_hot_key_before_parking": round(unparked, 2),
        "claim_ms_behind_hot_key_parked": round(parked, 2),
        "claim_ms_behind_hot_key_parked_after_vacuum": round(vacuumed, 2),
        "ratio_before_parking": round(unparked / alone, 1),
        "ratio_parked": round(parked / alone, 2),
        "ratio_parked_after_vacuum": round(vacuumed / alone, 2),
        "parking_sec": round(park_sec, 2), "park_statements": batches,
        "unparked_after_finish": len(next_rows), "holder_finish_ms": round(finish_ms, 2),
        "scan_before_parking": scan_unparked, "scan_parked": scan_parked, "scan_parked_after_vacuum": scan_vacuumed,
    })
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dsn", default="postgresql://postgres@127.0.0.1:5432/postgres")
    parser.add_argument("--hot", type=int, default=100_000)
    parser.add_argument("--others", type=int, default=1_000)
    parser.add_argument("--samples", type=int, default=40)
    print(json.dumps(asyncio.run(_run(parser.parse_args())), indent=2))


if __name__ == "__main__":
    main()
