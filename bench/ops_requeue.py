"""Bulk-requeue throughput beside a running drain (issue 11).

    .venv/bin/python -m bench.ops_requeue [--failed 100000] [--drain 300000] [--batch 500 2000]

In a fresh database: `--failed` failed dl.noop jobs (queue `bulk`, no worker serves it, so the
requeued jobs stay queued and only the requeue is timed) and `--drain` queued dl.noop jobs (queue
`drain`). One `python -m dataloader worker` process (concurrency 16 on `drain`, its operation
runner polling every 0.2 s) drains `drain` for the whole run. For each batch size: the drain rate
over a quiet window, then a bulk requeue of every failed job (the `bulk` jobs are failed again
between rounds), timed from the runner's `started` audit row to the operation's finished_at
(both stamped by the database), and the drain rate during it. Numbers: jobs/s.

PostgreSQL: BENCH_DSN, or the embedded server (bench/pg.py). Results: bench/results/ops-<UTC>.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

import asyncpg

from bench import pg, procs

ROOT = Path(__file__).resolve().parent.parent
QUIET_WINDOW = 5.0


async def succeeded(conn: asyncpg.Connection) -> int:
    return await conn.fetchval("SELECT count(*) FROM dl_jobs WHERE queue = 'drain' AND status = 'succeeded'")


async def drain_rate(conn: asyncpg.Connection, window: float) -> float:
    before, t0 = await succeeded(conn), time.monotonic()
    await asyncio.sleep(window)
    return (await succeeded(conn) - before) / (time.monotonic() - t0)


async def measure(dsn: str, failed: int, drain: int, batches: list[int], log_dir: Path) -> dict:
    from dataloader import App, Settings
    from dataloader.storage import migrate

    await migrate.upgrade(dsn)
    conn = await asyncpg.connect(dsn)
    await conn.execute(
        "INSERT INTO dl_jobs (job_id, queue, task, lock_key, status, attempt, max_attempts, created_at, "
        "available_at, finished_at, error) SELECT gen_random_uuid(), 'bulk', 'dl.noop', 'b' || g, 'failed', 1, 1, "
        "now() - make_interval(secs => g), now() - make_interval(secs => g), now(), 'RuntimeError: bad deploy' "
        "FROM generate_series(1, $1::int) g", failed)
    await conn.execute(
        "INSERT INTO dl_jobs (job_id, queue, task, lock_key) SELECT gen_random_uuid(), 'drain', 'dl.noop', 'd' || g "
        "FROM generate_series(1, $1::int) g", drain)
    await conn.execute("VACUUM ANALYZE dl_jobs")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DL_", "WORKERS_JSON"))}
    env.update({"DL_DB_DSN": dsn, "WORKERS_JSON": json.dumps([{"queue": "drain", "concurrency": 16}]),
                "DL_OPERATIONS_PERIOD_SEC": "0.2", "DL_LOG_LEVEL": "WARNING", "DL_LOG_FORMAT": "json",
                "DL_RETENTION_ENABLED": "false", "DL_STATS_ENABLED": "false",
                "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), env.get("PYTHONPATH", "")])})
    worker = await procs.spawn([sys.executable, "-m", "dataloader", "worker"], env, log_dir / "ops-worker.log")
    rounds = []
    try:
        async with App(Settings(db_dsn=dsn, workers=[], operations_enabled=False)) as app:
            deadline = time.monotonic() + 60
            while await succeeded(conn) == 0:
                if time.monotonic() > deadline:
                    raise SystemExit("bench: the worker drained nothing in 60 s (see the log)")
                await asyncio.sleep(0.1)
            for batch in batches:
                await conn.execute("UPDATE dl_jobs SET status = 'failed', finished_at = now() WHERE queue = 'bulk'")
                quiet = await drain_rate(conn, QUIET_WINDOW)
                before = await succeeded(conn)
                t0 = time.monotonic()
                op = await app.operations.start("requeue", {"queues": ["bulk"], "statuses": ["failed"]},
                                                batch_size=batch, started_by="bench")
                op = await app.operations.wait(op.id, timeout=1800, interval=0.05)
                wall = time.monotonic() - t0
                during = (await succeeded(conn) - before) / wall
                started = await conn.fetchval(
                    "SELECT ts FROM dl_operation_events WHERE operation_id = $1 AND kind = 'started'", op.id)
                seconds = (op.finished_at - started).total_seconds()
                remaining = await conn.fetchval("SELECT count(*) FROM dl_jobs WHERE queue = 'drain' "
                                                "AND status = 'queued'")
                rounds.append({"batch_size": batch, "jobs": op.changed, "requeue_sec": round(seconds, 3),
                               "requeue_jobs_per_sec": round(op.changed / seconds), "drain_quiet_per_sec":
                               round(quiet), "drain_during_per_sec": round(during),
                               "drain_left_after": remaining})
                print(json.dumps(rounds[-1]), flush=True)
                if remaining == 0:
                    print("bench: the drain ran out; raise --drain", file=sys.stderr)
    finally:
        await procs.stop(worker)
        await conn.close()
    return {"rounds": rounds}


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--failed", type=int, default=100_000)
    parser.add_argument("--drain", type=int, default=300_000)
    parser.add_argument("--batch", type=int, nargs="+", default=[500, 2000])
    args = parser.parse_args()
    server = pg.start_server()
    try:
        settings = await pg.read_settings(server)
        log_dir = Path(os.environ.get("BENCH_LOG_DIR", "/tmp"))
        async with pg.fresh_database(server, "ops") as dsn:
            result = await measure(dsn, args.failed, args.drain, args.batch, log_dir)
    finally:
        server.stop()
    result.update({"failed": args.failed, "drain": args.drain, "server": settings,
                   "load_avg": os.getloadavg(), "at": datetime.now(UTC).isoformat()})
    out = ROOT / "bench" / "results" / f"ops-{datetime.now(UTC):%Y%m%dT%H%M%SZ}.json"
    out.write_text(json.dumps(result, indent=2, default=str))
    print(f"bench: wrote {out.relative_to(ROOT)}")


if __name__ == "__main__":
    asyncio.run(main())
