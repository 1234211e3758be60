"""Measure leader fail-over after kill -9 over many kills:
`python -m tests.maintenance.measure_failover --dsn postgresql://postgres@127.0.0.1:5432/postgres
--kills 10 --retry 0.5`.

Keeps `--nodes` real `dataloader worker` processes running; each round kills the leader with
SIGKILL, times how long until another process holds the leader lock, and starts a replacement.
A command rather than a test because many rounds at the default 5 s retry take minutes. Creates a
fresh database on the server and drops it afterwards. The numbers are in docs/maintenance.md.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
from pathlib import Path

from dataloader.storage import migrate
from dataloader.storage.db import create_pool
from tests.conftest import wait_until
from tests.maintenance.failover import TICKS_DDL, kill_leader_and_time_takeover, leader_pid, start_worker, worker_env
from tests.support.database import TestServer, create_database, drop_database

ROOT = Path(__file__).resolve().parents[2]


async def measure(dsn_admin: str, kills: int, nodes: int, retry: float) -> list[float]:
    server = TestServer(admin_dsn=dsn_admin)
    dsn = await create_database(server)
    await migrate.upgrade(dsn)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DL_", "WORKERS_JSON"))}
    env.update({"DL_DB_DSN": dsn, "DL_LOG_FORMAT": "json", "PYTHONUNBUFFERED": "1",
                "PYTHONPATH": os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])})
    env = worker_env(env)
    pool = await create_pool(dsn, min_size=1, max_size=2)
    await pool.execute(TICKS_DDL)
    workers = {}
    started = []
    timings: list[float] = []
    try:
        for _ in range(nodes):
            w = start_worker(env, retry)
            started.append(w)
            workers[w.pid] = w
        await asyncio.gather(*(w.wait_ready() for w in workers.values()))
        for round_no in range(1, kills + 1):
            await wait_until(lambda: leader_pid(pool), timeout=retry * 2 + 30)
            old, new, took = await kill_leader_and_time_takeover(pool, workers, bound_sec=retry * 1.1 + 30)
            timings.append(took)
            print(f"kill {round_no}: leader {old} -> {new} in {took:.3f}s", flush=True)
            w = start_worker(env, retry)
            started.append(w)
            workers[w.pid] = w
            await w.wait_ready()
    finally:
        for w in started:
            w.close()
        await pool.close()
        await drop_database(server, dsn)
    return timings


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tests.maintenance.measure_failover")
    p.add_argument("--dsn", default=os.environ.get("DL_TEST_DSN"), help="admin DSN of a PostgreSQL server")
    p.add_argument("--kills", type=int, default=10)
    p.add_argument("--nodes", type=int, default=3)
    p.add_argument("--retry", type=float, default=5.0, help="DL_LEADER_RETRY_SEC of the nodes")
    args = p.parse_args(argv)
    if not args.dsn:
        p.error("--dsn (or DL_TEST_DSN) is required")
    timings = asyncio.run(measure(args.dsn, args.kills, args.nodes, args.retry))
    print(f"DL_LEADER_RETRY_SEC={args.retry}, {args.nodes} nodes, {len(timings)} kills: "
          f"min {min(timings):.3f}s, median {statistics.median(timings):.3f}s, max {max(timings):.3f}s, "
          f"bound {args.retry * 1.1:.2f}s + server/round-trip margin")
    return 0


if __name__ == "__main__":
    sys.exit(main())
