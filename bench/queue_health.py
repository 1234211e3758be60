"""A queue table over months, accelerated (issue 22): dl_jobs and dl_job_events bloat and vacuum
under constant churn, and what a long transaction elsewhere that holds the xmin horizon does to them.

    .venv/bin/python -m bench.queue_health [--rate 300] [--keep 30] [--phase 120] [--concurrency 8]
                                           (BENCH_DSN, or an embedded server; autovacuum as configured)

One node in this process (workers of one queue, no-op jobs) and a producer enqueueing `--rate` jobs
per second in batches; retention compressed: every 5 s `app.prune(older_than=--keep)` deletes the
jobs finished more than `--keep` seconds ago (with their journal rows), as the pruner does with its
days. So each row lives the life of a production row (insert, claim, finish, delete) in seconds,
and a phase of `--phase` seconds is `--phase / --keep` retention periods. Three phases:

  A. steady churn;
  B. the same churn while another session holds a REPEATABLE READ snapshot open (its backend_xmin
     holds back the horizon: no vacuum may remove a row deleted after it began);
  C. the snapshot released, the churn goes on.

Sampled every 5 s: the heap and index sizes of dl_jobs and dl_job_events, live and dead tuples,
autovacuum runs, the oldest backend_xmin age, the jobs finished and waiting, and the node's claim
statements in the interval (count, mean time, from its dl_claim_seconds); per phase the
throughput and the prune's cost. Writes `bench/results/queue-health-<UTC>.json` and prints a table.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import asyncpg

from bench.pg import fresh_database, start_server
from dataloader import App, Queue, Settings, metrics

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
QUEUE = "soak"
SAMPLE_SEC = 5.0

SIZES = """
SELECT c.relname,
       pg_relation_size(c.oid) AS heap_bytes,
       pg_indexes_size(c.oid) AS index_bytes,
       s.n_live_tup, s.n_dead_tup, s.autovacuum_count, s.vacuum_count
FROM pg_class c JOIN pg_stat_user_tables s ON s.relid = c.oid
WHERE c.relname IN ('dl_jobs', 'dl_job_events')
"""
XMIN_AGE = """
SELECT coalesce(max(age(backend_xmin)), 0) AS xmin_age_xids,
       coalesce(extract(epoch FROM max(now() - xact_start)
                        FILTER (WHERE backend_xmin IS NOT NULL AND state <> 'active')), 0) AS idle_xact_sec
FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()
"""


def claim_totals() -> tuple[float, float]:
    """(seconds, claims) the node's claim statements took so far (the in-process dl_claim_seconds)."""
    total = count = 0.0
    for family in metrics.CLAIM_SECONDS.collect():
        for s in family.samples:
            if s.labels.get("queue") == QUEUE and s.name.endswith("_sum"):
                total += s.value
            elif s.labels.get("queue") == QUEUE and s.name.endswith("_count"):
                count += s.value
    return total, count


async def sample(conn: asyncpg.Connection, t0: float, phase: str, claims: list[float]) -> dict[str, Any]:
    row: dict[str, Any] = {"t": round(time.monotonic() - t0, 1), "phase": phase}
    total, count = claim_totals()
    row["claims"] = int(count - claims[1])
    row["claim_ms_avg"] = round((total - claims[0]) / (count - claims[1]) * 1000, 2) if count > claims[1] else None
    claims[:] = [total, count]
    for r in await conn.fetch(SIZES):
        name = "jobs" if r["relname"] == "dl_jobs" else "events"
        row[f"{name}_heap_mb"] = round(r["heap_bytes"] / 2**20, 2)
        row[f"{name}_index_mb"] = round(r["index_bytes"] / 2**20, 2)
        row[f"{name}_live"] = r["n_live_tup"]
        row[f"{name}_dead"] = r["n_dead_tup"]
        row[f"{name}_autovacuums"] = r["autovacuum_count"]
    xmin = await conn.fetchrow(XMIN_AGE)
    row["oldest_xmin_age_xids"] = int(xmin["xmin_age_xids"])
    row["long_xact_sec"] = round(float(xmin["idle_xact_sec"]), 1)
    row["finished"] = await conn.fetchval("SELECT count(*) FROM dl_jobs WHERE status = 'succeeded'")
    row["waiting"] = await conn.fetchval("SELECT count(*) FROM dl_jobs WHERE status IN ('queued', 'running')")
    return row


async def produce(app: App, rate: float, stop: asyncio.Event, counter: list[int], queue: str = QUEUE) -> None:
    """No-op jobs into `queue` at `rate` per second, a batch every 100 ms, until `stop`; counts them."""
    batch = max(1, int(rate / 10))
    next_at = time.monotonic()
    while not stop.is_set():
        await app.enqueue_many([{"task": "dl.noop", "queue": queue} for _ in range(batch)])
        counter[0] += batch
        next_at += batch / rate
        await asyncio.sleep(max(0.0, next_at - time.monotonic()))


async def prune_loop(app: App, keep: float, stop: asyncio.Event, pruned: list[float]) -> None:
    while not stop.is_set():
        started = time.perf_counter()
        report = await app.prune(older_than=keep, batch_size=1000)
        pruned[0] += report.total
        pruned[1] += time.perf_counter() - started
        try:
            await asyncio.wait_for(stop.wait(), 5)
        except TimeoutError:
            pass


async def main(args: argparse.Namespace) -> dict[str, Any]:
    server = start_server()
    out: dict[str, Any] = {"server": server.kind, "args": vars(args) | {"src": None},
                           "load_average_before": os.getloadavg(), "samples": []}
    try:
        async with fresh_database(server, "health") as dsn:
            settings = Settings(db_dsn=dsn, workers=[Queue(QUEUE, args.concurrency)], retention_enabled=False,
                                stats_enabled=False, log_level="WARNING")
            app = App(settings)
            await app.open(migrate_schema=True)
            monitor = await asyncpg.connect(dsn)
            holder = await asyncpg.connect(dsn)
            out["autovacuum"] = {name: await monitor.fetchval(f"SHOW {name}") for name in (
                "autovacuum", "autovacuum_naptime", "autovacuum_vacuum_scale_factor",
                "autovacuum_vacuum_insert_scale_factor", "server_version")}
            stop = asyncio.Event()
            enqueued, pruned, claims = [0], [0.0, 0.0], list(claim_totals())
            t0 = time.monotonic()
            try:
                async with app.running():
                    tasks = [asyncio.create_task(produce(app, args.rate, stop, enqueued)),
                             asyncio.create_task(prune_loop(app, args.keep, stop, pruned))]
                    phases: dict[str, dict[str, Any]] = {}
                    for phase in ("A steady", "B xmin held", "C released"):
                        if phase.startswith("B"):
                            await holder.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
                            await holder.fetchval("SELECT count(*) FROM dl_queue_flow")  # takes the snapshot
                        if phase.startswith("C"):
                            await holder.execute("COMMIT")
                        start = {"t": time.monotonic(), "enqueued": enqueued[0], "pruned": pruned[0],
                                 "prune_sec": pruned[1]}
                        end = time.monotonic() + args.phase
                        last: dict[str, Any] = {}
                        while time.monotonic() < end:
                            await asyncio.sleep(SAMPLE_SEC)
                            last = await sample(monitor, t0, phase, claims)
                            out["samples"].append(last)
                            print(json.dumps(last), flush=True)
                        seconds = time.monotonic() - start["t"]
                        deleted = pruned[0] - start["pruned"]
                        phases[phase] = {"seconds": round(seconds, 1),
                                         "enqueued_per_sec": round((enqueued[0] - start["enqueued"]) / seconds, 1),
                                         "pruned": int(deleted),
                                         "prune_ms_per_1000": round((pruned[1] - start["prune_sec"]) * 1e6 / deleted, 1)
                                         if deleted else None,
                                         "end": last}
                    stop.set()
                    await asyncio.gather(*tasks)
            finally:
                await holder.close()
                await monitor.close()
                await app.close()
            out["phases"] = phases
    finally:
        server.stop()
    out["load_average_after"] = os.getloadavg()
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / f"queue-health-{datetime.now(UTC):%Y%m%dT%H%M%SZ}.json"
    path.write_text(json.dumps(out, indent=2, default=str) + "\n")
    out["file"] = str(path.relative_to(ROOT))
    return out


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rate", type=float, default=300)
    parser.add_argument("--keep", type=float, default=30)
    parser.add_argument("--phase", type=float, default=120)
    parser.add_argument("--concurrency", type=int, default=8)
    result = asyncio.run(main(parser.parse_args()))
    print(json.dumps(result["phases"], indent=2, default=str))
    print(result["file"])
