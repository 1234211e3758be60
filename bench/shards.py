"""The drain ceiling of one shard against two (issue 22 "Past one primary", docs/scaling.md).

Two embedded PostgreSQL servers on this machine. The same work in both arrangements: N no-op jobs
on queue `qa` and N on `qb`, enqueued up front, drained by `--procs` real `dataloader worker`
processes that each serve both queues (`--concurrency` each). "one": both queues on server 1.
"two": `qb` on server 2 (DL_SHARDS_JSON). Each measurement in fresh databases; the arrangements
alternate in pairs (one, two / two, one, ...) so the machine's other load lands on both alike; the
report is the per-pair ratio two/one of jobs per second.

    .venv/bin/python -m bench.shards --jobs 5000 --pairs 3
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import asyncpg

from bench.pg import Server, fresh_database, read_settings, start_server
from dataloader import App, Settings

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"


async def enqueue(dsn: str, shards: dict[str, Any], jobs: int) -> None:
    app = await App(Settings(db_dsn=dsn, workers=[], log_level="WARNING"), shards=shards).open(migrate_schema=True)
    try:
        for queue in ("qa", "qb"):
            for start in range(0, jobs, 1000):
                await app.enqueue_many([{"task": "dl.noop", "queue": queue}] * min(1000, jobs - start))
    finally:
        await app.close()


async def finished(dsns: list[str]) -> int:
    total = 0
    for dsn in dsns:
        conn = await asyncpg.connect(dsn)
        try:
            total += await conn.fetchval("SELECT count(*) FROM dl_jobs WHERE status = 'succeeded'")
        finally:
            await conn.close()
    return total


async def measure(arrangement: str, servers: list[Server], args: argparse.Namespace) -> dict[str, Any]:
    async with contextlib.AsyncExitStack() as stack:
        a = await stack.enter_async_context(fresh_database(servers[0], "shard_a"))
        b = await stack.enter_async_context(fresh_database(servers[1], "shard_b")) if arrangement == "two" else None
        shards = {"b": {"dsn": b, "queues": ["qb"]}} if b else {}
        await enqueue(a, shards, args.jobs)
        env = {k: v for k, v in os.environ.items() if not k.startswith(("DL_", "WORKERS_JSON"))}
        env.update({"DL_DB_DSN": a, "DL_LOG_LEVEL": "WARNING", "DL_LOG_FORMAT": "json",
                    "WORKERS_JSON": json.dumps([{"queue": q, "concurrency": args.concurrency} for q in ("qa", "qb")]),
                    "DL_SHARDS_JSON": json.dumps(shards), "DL_RETENTION_ENABLED": "false",
                    "DL_STATS_ENABLED": "false"})
        dsns = [a] + ([b] if b else [])
        procs = [await asyncio.create_subprocess_exec(
            sys.executable, "-m", "dataloader", "worker", env=env, start_new_session=True,
            stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL) for _ in range(args.procs)]
        try:
            # The clock starts at the first finished job: the workers' start (imports, migrations
            # check, LISTEN) is not the drain.
            deadline = time.monotonic() + args.timeout
            while (done := await finished(dsns)) == 0:
                if time.monotonic() > deadline:
                    raise SystemExit(f"bench.shards: {arrangement}: nothing finished in {args.timeout}s")
                await asyncio.sleep(0.05)
            t0, first = time.monotonic(), done
            while (done := await finished(dsns)) < 2 * args.jobs:
                if time.monotonic() > deadline:
                    raise SystemExit(f"bench.shards: {arrangement}: {done} of {2 * args.jobs} in {args.timeout}s")
                await asyncio.sleep(0.1)
            seconds = time.monotonic() - t0
        finally:
            for proc in procs:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGTERM)
            for proc in procs:
                try:
                    await asyncio.wait_for(proc.wait(), timeout=30)
                except TimeoutError:
                    os.killpg(proc.pid, signal.SIGKILL)
        return {"arrangement": arrangement, "jobs": 2 * args.jobs - first, "seconds": round(seconds, 3),
                "jobs_per_sec": round((2 * args.jobs - first) / seconds, 1), "load_average": os.getloadavg()}


async def main(args: argparse.Namespace) -> dict[str, Any]:
    if os.environ.get("BENCH_DSN"):
        raise SystemExit("bench.shards starts its own two servers; unset BENCH_DSN")
    servers = [start_server(), start_server()]
    out: dict[str, Any] = {"args": vars(args), "load_average_before": os.getloadavg(), "pairs": []}
    try:
        out["server"] = await read_settings(servers[0])
        await read_settings(servers[1])
        for pair in range(args.pairs):
            order = ("one", "two") if pair % 2 == 0 else ("two", "one")
            runs = {name: await measure(name, servers, args) for name in order}
            ratio = runs["two"]["jobs_per_sec"] / runs["one"]["jobs_per_sec"]
            out["pairs"].append({"order": order, **runs, "two_over_one": round(ratio, 3)})
            print(json.dumps(out["pairs"][-1]), flush=True)
    finally:
        for server in servers:
            server.stop()
    ratios = sorted(p["two_over_one"] for p in out["pairs"])
    out["median_two_over_one"] = ratios[len(ratios) // 2]
    out["load_average_after"] = os.getloadavg()
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / f"shards-{datetime.now(UTC):%Y%m%dT%H%M%SZ}.json"
    path.write_text(json.dumps(out, indent=2, default=str) + "\n")
    out["file"] = str(path.relative_to(ROOT))
    return out


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=5000, help="jobs per queue")
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--procs", type=int, default=2, help="worker processes (each serves both queues)")
    parser.add_argument("--concurrency", type=int, default=8, help="per queue per process")
    parser.add_argument("--timeout", type=float, default=600)
    result = asyncio.run(main(parser.parse_args()))
    print(json.dumps({"median_two_over_one": result["median_two_over_one"]}))
    print(result["file"])
