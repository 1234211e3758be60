"""Observers: redistribution time after kill -9, and the database cost of an idle observer fleet.

    BENCH_DSN=postgresql://postgres@127.0.0.1:5432/postgres .venv/bin/python -m bench.observers \
        [--kills 5] [--idle-window 30] [--fast]

Redistribution: 3 `dataloader worker` processes (capacity 12 each), 24 `bench.probe` observers (they
fit on two survivors). Each round kills -9 the node holding most, and times from the kill to the
moment the last of its observers wrote its `start` row on a survivor (the probe's own connection:
what really runs, not what the table says); then the node is restarted under its name. Any
`overlap` row (two copies at once) fails the run. Default settings (heartbeat 2 s, dead after 15 s)
unless --fast (0.5 s / 3 s).

Idle cost: 4 worker processes with capacity 250 run 1,000 `bench.idle` observers; the statements
of every session (new (pid, query_start) pairs in pg_stat_activity, sampled every 10 ms) over a
window, and the same window with the same nodes and no observers.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import asyncpg

from dataloader.storage import migrate
from dataloader.storage.db import create_pool
from dataloader.storage.observer_repository import NodeRepository, ObserverRepository

ROOT = Path(__file__).resolve().parent.parent
FAST = {"DL_NODE_HEARTBEAT_SEC": "0.5", "DL_NODE_DEAD_AFTER_SEC": "3", "DL_OBSERVER_STOP_GRACE_SEC": "1"}


def with_database(dsn: str, database: str) -> str:
    from bench.pg import with_database as replace

    return replace(dsn, database)


class Node:
    def __init__(self, dsn: str, name: str, capacity: int, extra: dict[str, str]) -> None:
        self.env = {k: v for k, v in os.environ.items() if not k.startswith(("DL_", "WORKERS_JSON"))}
        self.env.update({"DL_DB_DSN": dsn, "DL_NODE_NAME": name, "DL_OBSERVER_CAPACITY": str(capacity),
                         "DL_PIPELINE_MODULES": "bench.observer_kinds",
                         "WORKERS_JSON": '[{"queue":"bench-unused","concurrency":1}]',
                         "DL_LOG_LEVEL": "WARNING", "DL_LOG_FORMAT": "json",
                         "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]), **extra})
        self.name = name
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> Node:
        self.proc = subprocess.Popen([sys.executable, "-m", "dataloader", "worker"], env=self.env,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        return self

    def kill(self, sig: int = signal.SIGKILL) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, sig)
            self.proc.wait(30)


async def until(predicate: Any, timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = await predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(what)
        await asyncio.sleep(0.05)


async def redistribution(dsn: str, kills: int, fast: bool) -> dict[str, Any]:
    pool = await create_pool(dsn, min_size=1, max_size=4)
    observers, nodes_repo = ObserverRepository(pool), NodeRepository(pool)
    extra = FAST if fast else {}
    nodes = {n: Node(dsn, n, 12, extra).start() for n in ("n1", "n2", "n3")}
    times: list[float] = []
    try:
        await until(lambda: _live(nodes_repo, 3), 60, "3 nodes live")
        from bench.observer_kinds import DDL
        from dataloader.model.observer import ObserverSpec

        await pool.execute(DDL)
        for i in range(24):
            await observers.insert(ObserverSpec(name=f"probe-{i:02d}", kind="bench.probe"), None)
        await until(lambda: _started(pool, 24), 120, "24 probes started")
        for _ in range(kills):
            load = {n.name: n.running for n in await nodes_repo.list()}
            victim = max(load, key=lambda k: load[k])
            moving = [o.name for o in await observers.list(node=victim)]
            killed_wall = await pool.fetchval("SELECT clock_timestamp()")
            nodes[victim].kill()
            await until(lambda m=moving, k=killed_wall: _restarted(pool, m, k), 120, "moved probes started")
            last = await pool.fetchval("SELECT max(at) FROM bench_observer_events WHERE kind = 'start' "
                                       "AND name = ANY($1) AND at > $2", moving, killed_wall)
            times.append((last - killed_wall).total_seconds())
            print(f"  kill {victim}: {len(moving)} observers running again after {times[-1]:.2f} s", flush=True)
            nodes[victim] = Node(dsn, victim, 12, extra).start()
            await until(lambda: _live(nodes_repo, 3), 60, "restarted node live")
        overlaps = await pool.fetchval("SELECT count(*) FROM bench_observer_events WHERE kind = 'overlap'")
    finally:
        for node in nodes.values():
            node.kill(signal.SIGTERM)
        await pool.close()
    return {"kills": len(times), "seconds": times, "p50": statistics.median(times), "max": max(times),
            "overlaps": overlaps, "settings": "fast (0.5 s / 3 s)" if fast else "defaults (2 s / 15 s)"}


async def _live(repo: NodeRepository, n: int) -> bool:
    return len([x for x in await repo.list() if x.state == "live"]) == n


async def _started(pool: asyncpg.Pool, n: int) -> bool:
    return await pool.fetchval("SELECT count(DISTINCT name) FROM bench_observer_events WHERE kind = 'start'") >= n


async def _restarted(pool: asyncpg.Pool, names: list[str], since: Any) -> bool:
    return await pool.fetchval("SELECT count(DISTINCT name) FROM bench_observer_events WHERE kind = 'start' "
                               "AND name = ANY($1) AND at > $2", names, since) == len(names)


async def idle_cost(dsn: str, window: float, fleet: int = 1000, node_count: int = 4) -> dict[str, Any]:
    pool = await create_pool(dsn, min_size=1, max_size=2)
    capacity = fleet // node_count
    nodes = [Node(dsn, f"idle-{i}", capacity, {}).start() for i in range(node_count)]
    try:
        await until(lambda: _live(NodeRepository(pool), node_count), 60, "nodes live")
        await asyncio.sleep(5)
        empty = await _rate(pool, window)
        observers = ObserverRepository(pool)
        from dataloader.model.observer import ObserverSpec

        for i in range(fleet):
            await observers.insert(ObserverSpec(name=f"idle-{i:04d}", kind="bench.idle"), None)
        await until(lambda: _processing(pool, fleet), 120, "fleet running")
        await asyncio.sleep(5)
        full = await _rate(pool, window)
    finally:
        for node in nodes:
            node.kill(signal.SIGTERM)
        await pool.close()
    return {"nodes": node_count, "observers": fleet, "window_sec": window, "tps_without_observers": empty,
            "tps_with_observers": full, "extra_per_1000_observers": (full - empty) * 1000 / fleet}


async def _processing(pool: asyncpg.Pool, n: int) -> bool:
    return await pool.fetchval("SELECT count(*) FROM dl_observers WHERE state = 'processing'") == n


async def _rate(pool: asyncpg.Pool, window: float) -> float:
    """Statements per second of every other session, seen as new (pid, query_start) pairs in
    pg_stat_activity sampled every 10 ms (pg_stat_database's counters lag: idle backends flush
    them late). Idle statements are sparse, so two of one backend within 10 ms are unlikely."""
    seen: set[tuple[int, Any]] = set()
    async with pool.acquire() as conn:
        start = await conn.fetchval("SELECT clock_timestamp()")
        end = time.monotonic() + window
        while time.monotonic() < end:
            rows = await conn.fetch(
                "SELECT pid, query_start FROM pg_stat_activity WHERE datname = current_database() "
                "AND pid <> pg_backend_pid() AND query_start > $1", start)
            seen.update((r["pid"], r["query_start"]) for r in rows)
            await asyncio.sleep(0.01)
    return len(seen) / window


@contextlib.asynccontextmanager
async def fresh_database(admin: str):  # type: ignore[no-untyped-def]
    name = f"bench_obs_{uuid.uuid4().hex[:10]}"
    conn = await asyncpg.connect(admin)
    await conn.execute(f'CREATE DATABASE "{name}"')
    await conn.close()
    dsn = with_database(admin, name)
    await migrate.upgrade(dsn)
    try:
        yield dsn
    finally:
        conn = await asyncpg.connect(admin)
        await conn.execute(f'DROP DATABASE "{name}" WITH (FORCE)')
        await conn.close()


async def main(args: argparse.Namespace) -> dict[str, Any]:
    admin = os.environ.get("BENCH_DSN")
    if not admin:
        raise SystemExit("set BENCH_DSN (a server that allows CREATE DATABASE)")
    result: dict[str, Any] = {}
    if args.kills:
        async with fresh_database(admin) as dsn:
            result["redistribution"] = await redistribution(dsn, args.kills, args.fast)
    if args.idle_window:
        async with fresh_database(admin) as dsn:
            result["idle"] = await idle_cost(dsn, args.idle_window)
    return result


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--kills", type=int, default=5)
    parser.add_argument("--idle-window", type=float, default=30)
    parser.add_argument("--fast", action="store_true")
    print(json.dumps(asyncio.run(main(parser.parse_args())), indent=2, default=str))
