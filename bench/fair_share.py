"""Fair share across partition keys (issue 21 part B): what it buys and what it costs.

    python -m bench.fair_share --dsn postgresql://postgres@127.0.0.1:5432/postgres [--hot 100000]
        [--small 20 --small-jobs 100] [--concurrency 16] [--tenants 1000] [--samples 300]
        [--parts drain,claim,enqueue] [--db-prefix dl_fair_]

- drain: one tenant with `--hot` queued jobs (enqueued first: the oldest) and `--small` tenants
  with `--small-jobs` each, all no-op; one in-process node with `--concurrency` slots drains the
  queue until every small tenant's jobs have run, once with the queue fair and once not, each in a
  fresh database (same run, same machine). From the 'picked' journal rows (one per start, with the
  claim's time): each small tenant's first-job start delay (from the run's first start), and Jain's
  fairness index J = (sum x)^2 / (n * sum x^2) of the starts x per tenant in each 1 s window, over
  the n tenants that still had queued jobs at the window's start; reported as the mean over the
  windows until the small tenants are done (1 = every tenant with work got the same share; 1/n =
  one tenant got everything).
- claim: the claim statement alone (claim(16), each in a rolled-back transaction, prepared like
  the worker's), fair vs default on the same table, interleaved: at the drain's shape (1 hot +
  small tenants) and with `--tenants` tenants of 100 jobs each. The default claim is also timed
  against the claim of main before this change (no fair_share term, no task probe), interleaved.
- enqueue: a 20,000-row INSERT with and without ix_dl_jobs_fair (the only cost fair share adds to
  a queue that is not fair), interleaved, each rolled back.

Prints one JSON document.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import statistics
import time
import uuid
from collections import Counter, defaultdict
from typing import Any

import asyncpg

from bench.pg import with_database
from dataloader import App, Queue, Settings
from dataloader.storage import migrate
from dataloader.storage.queue_connection import claim_sql, fair_claim_sql

QUEUE = "q"

INSERT = ("INSERT INTO dl_jobs (job_id, queue, task, lock_key, partition_key, args, created_at, available_at) "
          "SELECT gen_random_uuid(), $1, 'dl.noop', gen_random_uuid()::text, $2, '{}', "
          "now() - make_interval(secs => $3) + g * interval '1 ms', "
          "now() - make_interval(secs => $3) + g * interval '1 ms' "
          "FROM generate_series(1, $4) g")


@contextlib.asynccontextmanager
async def fresh_database(dsn: str, prefix: str):
    name = f"{prefix}{uuid.uuid4().hex[:8]}"
    admin = await asyncpg.connect(dsn)
    await admin.execute(f'CREATE DATABASE "{name}"')
    try:
        url = with_database(dsn, name)
        await migrate.upgrade(url)
        yield url
    finally:
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        await admin.close()


async def load(conn: asyncpg.Connection, hot: int, small: int, small_jobs: int) -> None:
    if hot:
        await conn.execute(INSERT, QUEUE, "hot", 7200.0, hot)
    for i in range(small):
        await conn.execute(INSERT, QUEUE, f"t{i:04}", 60.0 - i * 0.001, small_jobs)
    await conn.execute("VACUUM ANALYZE dl_jobs")


def jain(shares: list[int]) -> float:
    total = sum(shares)
    return total * total / (len(shares) * sum(x * x for x in shares)) if total else 1.0


async def drain(dsn: str, args: argparse.Namespace, fair: bool) -> dict[str, Any]:
    async with fresh_database(dsn, args.db_prefix) as url:
        conn = await asyncpg.connect(url)
        try:
            await load(conn, args.hot, args.small, args.small_jobs)
            small_total = args.small * args.small_jobs
            app = await App(Settings(db_dsn=url, workers=[])).open()
            try:
                await app.configure_queue(QUEUE, fair_share=fair)
                started = time.monotonic()
                async with app.running(queues=[Queue(queue=QUEUE, concurrency=args.concurrency)], reaper=False):
                    while time.monotonic() - started < args.timeout:
                        left = await conn.fetchval(
                            "SELECT count(*) FROM dl_jobs WHERE queue = $1 AND partition_key <> 'hot' "
                            "AND status <> 'succeeded'", QUEUE)
                        if left == 0:
                            break
                        await asyncio.sleep(0.2)
                elapsed = time.monotonic() - started
            finally:
                await app.close()
            rows = await conn.fetch(
                "SELECT j.partition_key AS tenant, extract(epoch FROM e.ts)::float8 AS at FROM dl_job_events e "
                "JOIN dl_jobs j USING (job_id) WHERE e.kind = 'picked' ORDER BY e.event_id")
        finally:
            await conn.close()
    t0 = rows[0]["at"]
    first: dict[str, float] = {}
    last: dict[str, float] = {}
    for r in rows:
        first.setdefault(r["tenant"], r["at"] - t0)
        last[r["tenant"]] = r["at"] - t0
    small_names = [f"t{i:04}" for i in range(args.small)]
    delays = sorted(first.get(t, float("inf")) for t in small_names)
    small_done = max((last.get(t, float("inf")) for t in small_names), default=0.0)
    windows: dict[int, Counter[str]] = defaultdict(Counter)
    for r in rows:
        windows[int(r["at"] - t0)][r["tenant"]] += 1
    tenants = ["hot", *small_names] if args.hot else small_names
    indices = []
    for w in range(int(min(small_done, rows[-1]["at"] - t0)) + 1):
        active = [t for t in tenants if last.get(t, float("inf")) >= w]  # still had jobs to start
        if len(active) >= 2:
            indices.append(jain([windows[w][t] for t in active]))
    small_starts = sum(1 for r in rows if r["tenant"] != "hot")
    return {
        "fair": fair, "starts": len(rows), "small_starts": small_starts, "small_jobs": small_total,
        "elapsed_sec": round(elapsed, 1), "first_start_delay_sec": {
            "median": round(statistics.median(delays), 3), "max": round(delays[-1], 3)},
        "small_tenants_done_sec": round(small_done, 2),
        "hot_starts_before_small_done": sum(1 for r in rows if r["tenant"] == "hot" and r["at"] - t0 <= small_done),
        "jain_mean": round(statistics.fmean(indices), 3) if indices else None, "windows": len(indices),
    }


def main_claim_sql(limit: int) -> str:
    """The default claim without fair share's and the task pause's terms (the base of the A/B)."""
    text = claim_sql(limit)
    assert " OR f.fair_share))" in text
    text = text.replace(" OR f.fair_share))", "))")
    lines = [line for line in text.splitlines() if "dl_task_flow" not in line]
    return "\n".join(lines)


async def timed(conn: asyncpg.Connection, statement: asyncpg.prepared_stmt.PreparedStatement, fair: bool) -> float:
    tr = conn.transaction()
    await tr.start()
    await conn.execute("UPDATE dl_queue_flow SET fair_share = $2 WHERE queue = $1", QUEUE, fair)
    t = time.perf_counter()
    await statement.fetch(QUEUE, "bench")
    elapsed = time.perf_counter() - t
    await tr.rollback()
    await conn.execute("SELECT pg_advisory_unlock_all()")
    return elapsed * 1000


async def claim_costs(dsn: str, args: argparse.Namespace) -> dict[str, Any]:
    result: dict[str, Any] = {}
    shapes = {f"1 hot x {args.hot} + {args.small} x {args.small_jobs}": (args.hot, args.small, args.small_jobs),
              f"{args.tenants} tenants x 100": (0, args.tenants, 100)}
    for label, (hot, small, small_jobs) in shapes.items():
        async with fresh_database(dsn, args.db_prefix) as url:
            conn = await asyncpg.connect(url, server_settings={"jit": "off", "enable_seqscan": "off"})
            try:
                await load(conn, hot, small, small_jobs)
                await conn.execute("INSERT INTO dl_queue_flow (queue) VALUES ($1)", QUEUE)
                fair, default, base = (await conn.prepare(fair_claim_sql(16)), await conn.prepare(claim_sql(16)),
                                       await conn.prepare(main_claim_sql(16)))
                samples: dict[str, list[float]] = {"fair": [], "default": [], "default_before": []}
                for _ in range(args.samples):
                    samples["fair"].append(await timed(conn, fair, True))
                    samples["default"].append(await timed(conn, default, False))
                    samples["default_before"].append(await timed(conn, base, False))
                result[label] = {k: round(statistics.median(v), 3) for k, v in samples.items()}
            finally:
                await conn.close()
    return result


async def enqueue_cost(dsn: str, args: argparse.Namespace) -> dict[str, Any]:
    async with fresh_database(dsn, args.db_prefix) as url:
        conn = await asyncpg.connect(url)
        try:
            times: dict[str, list[float]] = {"with ix_dl_jobs_fair": [], "without": []}
            for _ in range(args.enqueue_rounds):
                for label in times:
                    tr = conn.transaction()
                    await tr.start()
                    if label == "without":
                        await conn.execute("DROP INDEX ix_dl_jobs_fair")
                    t = time.perf_counter()
                    await conn.execute(INSERT, QUEUE, "x", 10.0, 20_000)
                    times[label].append((time.perf_counter() - t) * 1e6 / 20_000)
                    await tr.rollback()
            return {f"{k}, µs per job (median)": round(statistics.median(v), 2) for k, v in times.items()}
        finally:
            await conn.close()


async def _run(args: argparse.Namespace) -> dict[str, Any]:
    parts = set(args.parts.split(","))
    out: dict[str, Any] = {"hot": args.hot, "small": args.small, "small_jobs": args.small_jobs,
                           "concurrency": args.concurrency}
    if "drain" in parts:
        out["drain"] = [await drain(args.dsn, args, fair) for fair in (True, False)]
    if "claim" in parts:
        out["claim_ms_median"] = await claim_costs(args.dsn, args)
    if "enqueue" in parts:
        out["enqueue"] = await enqueue_cost(args.dsn, args)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dsn", required=True)
    parser.add_argument("--hot", type=int, default=100_000)
    parser.add_argument("--small", type=int, default=20)
    parser.add_argument("--small-jobs", type=int, default=100)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--tenants", type=int, default=1000)
    parser.add_argument("--samples", type=int, default=300)
    parser.add_argument("--enqueue-rounds", type=int, default=5)
    parser.add_argument("--timeout", type=float, default=600)
    parser.add_argument("--parts", default="drain,claim,enqueue")
    parser.add_argument("--db-prefix", default="dl_fair_")
    print(json.dumps(asyncio.run(_run(parser.parse_args())), indent=2))


if __name__ == "__main__":
    main()
