"""The database cost and memory of one idle node with default settings (issue 13).

    BENCH_DSN=postgresql://postgres@127.0.0.1:5432/postgres .venv/bin/python -m bench.idle_node \
        [--command serve|worker] [--window 60] [--settle 15] [--baseline 20] [--src DIR]

A fresh database, migrated; `python -m dataloader serve` (or `worker`) with nothing but DL_DB_DSN set (so
every default loop runs: workers of the default queue, listener, reaper, node heartbeat, observer
runner, scheduler, operations runner, leader election, pruner, stats rollup). Once its node row is
live and `--settle` seconds have passed (longer than PostgreSQL's 10 s stats flush of an idle
backend), the window counts:

- transactions: `xact_commit + xact_rollback` of the database in `pg_stat_database`, read from the
  `postgres` database so the reads do not count, minus the same count over `--baseline` seconds
  with no node at all (autovacuum);
- statements by text: new `(pid, query_start)` pairs in `pg_stat_activity`, sampled every 2 ms, to
  see which loop pays for what (a burst on one session can hide some: transactions are the
  reference), and the sessions opened during the window;
- RSS of the node process (psutil) at the end of the window.

Writes `bench/results/idle-node-<UTC timestamp>.json` and prints it.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import os
import socket
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import asyncpg
import psutil

from bench import procs
from bench.pg import Server, database_of, fresh_database

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def counters(admin: asyncpg.Connection, database: str) -> tuple[int, int]:
    """(transactions, sessions opened) of the database so far."""
    row = await admin.fetchrow(
        "SELECT xact_commit + xact_rollback AS xacts, sessions FROM pg_stat_database WHERE datname = $1", database)
    return int(row["xacts"]), int(row["sessions"])


async def window(admin_dsn: str, database: str, seconds: float) -> dict[str, Any]:
    """Transactions per second over `seconds`, and the statements seen, by text."""
    admin = await asyncpg.connect(admin_dsn)
    try:
        # An idle backend flushes its counters late; clear what is pending before the first read.
        await admin.execute("SELECT pg_stat_clear_snapshot()")
        before, sessions_before = await counters(admin, database)
        start = await admin.fetchval("SELECT clock_timestamp()")
        seen: dict[tuple[int, Any], str] = {}
        sessions: dict[int, str] = {}
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            rows = await admin.fetch(
                "SELECT pid, query_start, backend_start, backend_type, application_name, "
                "left(regexp_replace(query, '\\s+', ' ', 'g'), 90) AS q "
                "FROM pg_stat_activity WHERE datname = $1 AND query_start > $2", database, start)
            for r in rows:
                who = r["application_name"] or r["backend_type"]
                seen.setdefault((r["pid"], r["query_start"]), f"{who} | {r['q']}")
                if r["backend_start"] > start:
                    sessions.setdefault(r["pid"], r["backend_type"])
            await asyncio.sleep(0.002)
        await admin.execute("SELECT pg_stat_clear_snapshot()")
        after, sessions_after = await counters(admin, database)
    finally:
        await admin.close()
    by_text = collections.Counter(seen.values())
    return {"seconds": seconds, "tps": (after - before) / seconds, "statements_per_sec": len(seen) / seconds,
            "sessions_opened": sessions_after - sessions_before,
            "sessions_seen_opening": collections.Counter(sessions.values()),
            "statements": {text: n for text, n in by_text.most_common()}}


async def node_live(dsn: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            conn = await asyncpg.connect(dsn)
            try:
                if await conn.fetchval("SELECT count(*) FROM dl_nodes WHERE state = 'live'"):
                    return
            finally:
                await conn.close()
        except (OSError, asyncpg.PostgresError):
            pass
        await asyncio.sleep(0.5)
    raise SystemExit("bench.idle_node: the node did not register in time")


async def main(args: argparse.Namespace) -> dict[str, Any]:
    admin = os.environ.get("BENCH_DSN")
    if not admin:
        raise SystemExit("set BENCH_DSN (a server that allows CREATE DATABASE)")
    server = Server(admin_dsn=admin, kind="BENCH_DSN")
    result: dict[str, Any] = {"command": args.command, "settle_sec": args.settle, "src": str(args.src),
                              "load_average_before": os.getloadavg()}
    async with fresh_database(server, "idle_node") as dsn:
        database = database_of(dsn)
        env = {k: v for k, v in os.environ.items() if not k.startswith(("DL_", "WORKERS_JSON"))}
        env.update({"DL_DB_DSN": dsn, "DL_LOG_LEVEL": "WARNING",
                    "PYTHONPATH": os.pathsep.join([str(args.src), env.get("PYTHONPATH", "")])})
        # Migrated beforehand by the node's own code, as a deployment's `dataloader db upgrade`
        # does: the node's start then finds the schema at head, the common case (and the one its
        # memory is measured in).
        upgrade = await asyncio.create_subprocess_exec(sys.executable, "-m", "dataloader", "db", "upgrade", env=env,
                                                       stdout=asyncio.subprocess.DEVNULL)
        if await upgrade.wait() != 0:
            raise SystemExit("bench.idle_node: `dataloader db upgrade` failed")
        if args.baseline:
            result["baseline"] = await window(admin, database, args.baseline)
        argv = [sys.executable, "-m", "dataloader", args.command]
        if args.command == "serve":
            argv += ["--port", str(free_port())]
        log = Path(f"/tmp/bench-idle-node-{os.getpid()}.log")
        proc = await procs.spawn(argv, env, log)
        try:
            await node_live(dsn, 120)
            await asyncio.sleep(args.settle)
            node = await window(admin, database, args.window)
            result["rss_mb"] = procs.tree_rss([proc.pid]) / 2**20
            result["node_threads"] = psutil.Process(proc.pid).num_threads()
            if proc.returncode is not None:
                raise SystemExit(f"bench.idle_node: the node exited ({proc.returncode}); see {log}")
        finally:
            await procs.stop(proc)
    base = result.get("baseline", {}).get("tps", 0.0)
    result["node"] = node
    result["tps_net"] = max(0.0, node["tps"] - base)
    result["load_average_after"] = os.getloadavg()
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / f"idle-node-{datetime.now(UTC):%Y%m%dT%H%M%SZ}.json"
    path.write_text(json.dumps(result, indent=2, default=str) + "\n")
    result["file"] = str(path.relative_to(ROOT))
    return result


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--command", choices=["serve", "worker"], default="serve")
    parser.add_argument("--window", type=float, default=60)
    parser.add_argument("--settle", type=float, default=15)
    parser.add_argument("--baseline", type=float, default=20)
    parser.add_argument("--src", type=Path, default=ROOT / "src",
                        help="the dataloader source tree the node runs (e.g. `git archive` of another commit)")
    print(json.dumps(asyncio.run(main(parser.parse_args())), indent=2, default=str))
