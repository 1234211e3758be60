"""What a queue's limits cost the claim (issue 21): the claim statement alone, the code under test
against a base commit's, interleaved on one connection, for a queue with no limit (claim_jobs.sql)
and with each limit on (claim_limited_jobs.sql, the flow gate; limits set high enough that nothing
is held back, so each sample claims the same jobs).

    python -m bench.flow_limits --dsn postgresql://postgres@127.0.0.1:5432/postgres [--base main]
        [--against plain|limited]

A fresh database (named after the flow-limits branch) is made and dropped per run: 20,000 queued
jobs of queue `q`, distinct lock_keys, 100 partition keys, ANALYZE. Each sample runs the claim in a
transaction that is rolled back (and the advisory locks released), so every sample sees the same
table; the gate's writes (the starts of a rate-limited queue) roll back with it. The rate shapes
keep 1,000 starts in their window (period one day), so their counts read a full window's rows; so
do the shapes of a task's limits (0027: the task's row, and dl_task_starts for its rate).
Prints the median round trip per shape, in µs, and each shape's ratio to the base commit's claim
measured in the same loop.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import time
import uuid

import asyncpg

from bench.pg import with_database
from dataloader.storage import migrate
from dataloader.storage.queue_connection import claim_limited_sql, claim_sql

SHAPES: dict[str, str | None] = {
    "no flow row": None,
    "flow row, no limit": "INSERT INTO dl_queue_flow (queue) VALUES ('q')",
    "concurrency": "INSERT INTO dl_queue_flow (queue, concurrency) VALUES ('q', 1000000)",
    "partition_concurrency": "INSERT INTO dl_queue_flow (queue, partition_concurrency) VALUES ('q', 1000000)",
    "rate": "INSERT INTO dl_queue_flow (queue, rate_limit, rate_period_sec) VALUES ('q', 100000, 86400)",
    "partition_rate": "INSERT INTO dl_queue_flow (queue, partition_rate_limit, partition_rate_period_sec) "
                      "VALUES ('q', 100000, 86400)",
    "all four": "INSERT INTO dl_queue_flow (queue, concurrency, partition_concurrency, rate_limit, rate_period_sec, "
                "partition_rate_limit, partition_rate_period_sec) VALUES ('q', 1000000, 1000000, 100000, 86400, "
                "100000, 86400)",
    # limits per task (0027): the queue's row says task_limited, the task's row holds the limit
    "task concurrency": "INSERT INTO dl_queue_flow (queue, task_limited) VALUES ('q', true); "
                        "INSERT INTO dl_task_flow (queue, task, concurrency) VALUES ('q', 'dl.noop', 1000000)",
    "task rate": "INSERT INTO dl_queue_flow (queue, task_limited) VALUES ('q', true); "
                 "INSERT INTO dl_task_flow (queue, task, rate_limit, rate_period_sec) "
                 "VALUES ('q', 'dl.noop', 100000, 86400)",
    "a paused other task": "INSERT INTO dl_task_flow (queue, task, paused) VALUES ('q', 'other', true)",
}


UNLIMITED = ("no flow row", "flow row, no limit", "a paused other task")


def base_claim_sql(base: str, limit: int, name: str = "claim_jobs") -> str:
    text = subprocess.run(["git", "show", f"{base}:src/dataloader/storage/queries/{name}.sql"],
                          check=True, capture_output=True, text=True).stdout
    return text.replace("{limit}", str(limit))


async def install_base_gate(conn: asyncpg.Connection) -> None:
    """The three-argument gate of 0023, as that commit wrote it: what the base commit's limited claim
    calls (0027 keeps it beside its own; written again so a base older or newer reads the same)."""
    import importlib

    await conn.execute(importlib.import_module("dataloader.storage.migrations.versions.0023_flow_gate").GATE)


async def _sample(conn: asyncpg.Connection, statement: str) -> float:
    tr = conn.transaction()
    await tr.start()
    started = time.perf_counter()
    await conn.fetch(statement, "q", "bench")
    elapsed = time.perf_counter() - started
    await tr.rollback()
    await conn.execute("SELECT pg_advisory_unlock_all()")
    return elapsed


async def _run(args: argparse.Namespace) -> dict[str, object]:
    name = f"flow-limits_bench_{uuid.uuid4().hex[:8]}"
    admin = await asyncpg.connect(args.dsn)
    await admin.execute(f'CREATE DATABASE "{name}"')
    results: dict[str, object] = {"base": args.base, "jobs": args.jobs, "samples": args.samples}
    try:
        dsn = with_database(args.dsn, name)
        await migrate.upgrade(dsn)
        conn = await asyncpg.connect(dsn, server_settings={"enable_seqscan": "off", "jit": "off"})
        try:
            await conn.execute("INSERT INTO dl_jobs (job_id, queue, task, lock_key, partition_key, args) "
                               "SELECT gen_random_uuid(), 'q', 'dl.noop', 'k' || g, 'p' || (g % 100), '{}' "
                               "FROM generate_series(1, $1) g", args.jobs)
            await conn.execute("INSERT INTO dl_flow_starts (queue, partition_key, job_id, started_at) "
                               "SELECT 'q', 'p' || (g % 100), gen_random_uuid(), now() FROM generate_series(1, 1000) g")
            await conn.execute("INSERT INTO dl_task_starts (queue, task, job_id, started_at) "
                               "SELECT 'q', 'dl.noop', gen_random_uuid(), now() FROM generate_series(1, 1000) g")
            await conn.execute("ANALYZE")
            if args.against == "limited":
                await install_base_gate(conn)
            for limit in args.limits:
                for shape, setup in SHAPES.items():
                    # what the worker runs: the plain claim for a queue with no limit, the gated one otherwise
                    new = claim_sql(limit) if shape in UNLIMITED else claim_limited_sql(limit)
                    # `--against limited`: a queue's limits against the base's gated claim (a task's
                    # limits have no base: they are skipped); otherwise against the base's plain claim
                    if args.against == "limited" and shape not in UNLIMITED:
                        if shape.startswith("task"):
                            continue
                        base = base_claim_sql(args.base, limit, "claim_limited_jobs")
                    else:
                        base = base_claim_sql(args.base, limit)
                    await conn.execute("DELETE FROM dl_queue_flow; DELETE FROM dl_task_flow")
                    if setup:
                        await conn.execute(setup)
                    base_t: list[float] = []
                    new_t: list[float] = []
                    for _ in range(5):  # warm both (prepare, plan cache)
                        await _sample(conn, base)
                        await _sample(conn, new)
                    for i in range(args.samples):
                        first, second = (base, new) if i % 2 else (new, base)
                        a = await _sample(conn, first)
                        b = await _sample(conn, second)
                        (base_t if first is base else new_t).append(a)
                        (new_t if second is new else base_t).append(b)
                    mb, mn = statistics.median(base_t) * 1e6, statistics.median(new_t) * 1e6
                    results[f"claim({limit}) {shape}"] = {"base_us": round(mb, 1), "new_us": round(mn, 1),
                                                          "ratio": round(mn / mb, 3)}
                    print(f"claim({limit}) {shape:24s} base {mb:8.1f} µs  new {mn:8.1f} µs  ratio {mn / mb:.3f}",
                          flush=True)
        finally:
            await conn.close()
    finally:
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        await admin.close()
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dsn", default="postgresql://postgres@127.0.0.1:5432/postgres")
    parser.add_argument("--base", default="main")
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--samples", type=int, default=1000)
    parser.add_argument("--limits", type=int, nargs="+", default=[1, 16])
    parser.add_argument("--against", choices=("plain", "limited"), default="plain",
                        help="compare a limited queue's claim with the base's plain claim (what a limit costs) "
                             "or with the base's limited claim (what this change costs it)")
    print(json.dumps(asyncio.run(_run(parser.parse_args())), indent=2))


if __name__ == "__main__":
    main()
