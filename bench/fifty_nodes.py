"""Many nodes on one database (issue 22): what N `dataloader worker` processes cost PostgreSQL.

    .venv/bin/python -m bench.fifty_nodes [--nodes 10,25,50] [--concurrency 2] [--window 30]
        [--settle 12] [--enqueues 200] [--burst 2000]          (BENCH_DSN, or an embedded server)

For each fleet size, in a fresh migrated database, N `python -m dataloader worker` processes (one
queue, `--concurrency` each, everything else default: listener, reaper, node heartbeat, scheduler,
operation runner, leader election, pruner, stats rollup) are started and waited for until every
node's `dl_nodes` row is live; then:

- connections: client sessions of the database in `pg_stat_activity` (total and per node);
- idle cost: transactions per second of the database (`xact_commit + xact_rollback` in
  `pg_stat_database`, read from another database so the reads do not count) over `--window`
  seconds after `--settle` seconds, net of a baseline window without nodes (autovacuum), per node;
- LISTEN fan-out: `--enqueues` single inserts, one at a time, each committing one NOTIFY (dl_jobs'
  insert trigger) that every node hears: the client's time per insert, and the transactions per
  insert across the fleet (the insert itself, the winner's claim and finish, and each other woken
  node's empty claim and its look for the next due job);
- claim contention: a burst of `--burst` no-op jobs inserted in one statement (one NOTIFY), drained by the
  fleet: seconds to drain, and transactions per job (claims that came back empty are the excess
  over the jobs' own claims and finishes).

Writes `bench/results/fifty-nodes-<UTC timestamp>.json` and prints it. `measure_fleet` is also what
tests/topology/test_many_nodes.py runs at a small N with the same assertions.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import asyncpg

from bench.pg import Server, database_of, fresh_database, start_server, with_database

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
QUEUE = "fleet"


async def _xacts(admin: asyncpg.Connection, database: str) -> int:
    await admin.execute("SELECT pg_stat_clear_snapshot()")
    return int(await admin.fetchval(
        "SELECT xact_commit + xact_rollback FROM pg_stat_database WHERE datname = $1", database))


async def _flushed_xacts(admin: asyncpg.Connection, database: str) -> int:
    # A backend that goes idle reports its counters within PGSTAT_IDLE_INTERVAL (10 s, PostgreSQL
    # 15+); wait that out so every transaction of the phase is counted when it is read.
    await asyncio.sleep(11)
    return await _xacts(admin, database)


async def idle_tps(admin: asyncpg.Connection, database: str, seconds: float) -> float:
    before = await _xacts(admin, database)
    await asyncio.sleep(seconds)
    return (await _xacts(admin, database) - before) / seconds


async def connections(admin: asyncpg.Connection, database: str, own: asyncpg.Connection) -> int:
    """Client sessions of the database, the measuring connection `own` aside."""
    return int(await admin.fetchval(
        "SELECT count(*) FROM pg_stat_activity WHERE datname = $1 AND backend_type = 'client backend' "
        "AND pid <> $2", database, own.get_server_pid()))


async def _wait_live(conn: asyncpg.Connection, n: int, timeout: float) -> float:
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        live = await conn.fetchval("SELECT count(*) FROM dl_nodes WHERE state = 'live'")
        if live >= n:
            return time.monotonic() - started
        await asyncio.sleep(0.5)
    raise RuntimeError(f"only {live} of {n} nodes became live in {timeout:.0f} s")


def node_env(dsn: str, concurrency: int, src: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DL_", "WORKERS_JSON"))}
    env.update({"DL_DB_DSN": dsn, "DL_LOG_LEVEL": "WARNING",
                "WORKERS_JSON": json.dumps([{"queue": QUEUE, "concurrency": concurrency}]),
                "PYTHONPATH": os.pathsep.join([str(src), env.get("PYTHONPATH", "")])})
    return env


async def measure_fleet(admin_dsn: str, dsn: str, nodes: int, *, concurrency: int = 2, window: float = 30,
                        settle: float = 12, enqueues: int = 200, burst: int = 2000, src: Path = ROOT / "src",
                        log_dir: Path | None = None, start_timeout: float = 300) -> dict[str, Any]:
    """Start `nodes` workers on the migrated database `dsn` and measure (module docstring). The
    nodes are stopped (SIGTERM, then kill) before it returns. `admin_dsn` is another database of the
    same server, for reading the counters."""
    database = database_of(dsn)
    log_dir = log_dir or Path(f"/tmp/bench-fleet-{os.getpid()}")
    log_dir.mkdir(parents=True, exist_ok=True)
    admin = await asyncpg.connect(admin_dsn)
    conn = await asyncpg.connect(dsn)
    procs: list[asyncio.subprocess.Process] = []
    result: dict[str, Any] = {"nodes": nodes, "concurrency": concurrency}
    try:
        result["baseline_tps"] = await idle_tps(admin, database, min(window, 10))
        env = node_env(dsn, concurrency, src)
        for i in range(nodes):
            log = (log_dir / f"node-{nodes}-{i}.log").open("wb")
            procs.append(await asyncio.create_subprocess_exec(
                sys.executable, "-m", "dataloader", "worker", env={**env, "DL_NODE_NAME": f"fleet-{i}"},
                stdout=log, stderr=log, start_new_session=True))
        result["start_sec"] = round(await _wait_live(conn, nodes, start_timeout), 1)
        await asyncio.sleep(settle)
        result["connections"] = await connections(admin, database, conn)
        result["connections_per_node"] = round(result["connections"] / nodes, 2)
        tps = await idle_tps(admin, database, window)
        result["idle_tps"] = round(tps, 2)
        result["idle_tps_per_node"] = round(max(0.0, tps - result["baseline_tps"]) / nodes, 3)

        # LISTEN fan-out: one NOTIFY per enqueue, heard by every node
        before, phase_started = await _xacts(admin, database), time.monotonic()
        started = time.perf_counter()
        for _ in range(enqueues):
            # dl_jobs' insert trigger sends the NOTIFY (one per statement), as for every enqueue
            await conn.execute(
                "INSERT INTO dl_jobs (job_id, queue, task, lock_key) VALUES ($1, $2, 'dl.noop', $3)",
                uuid.uuid4(), QUEUE, uuid.uuid4().hex)
        took = time.perf_counter() - started
        await _drained(conn, timeout=120)
        after = await _flushed_xacts(admin, database)
        result["enqueue_ms"] = round(took / enqueues * 1000, 3)
        result["xacts_per_enqueue"] = round((after - before) / enqueues, 2)
        # net of what the fleet spends idle over the same time (its heartbeats, duties)
        idle_share = tps * (time.monotonic() - phase_started)
        result["xacts_per_enqueue_net"] = round((after - before - idle_share) / enqueues, 2)

        # claim contention: a burst in one statement, one NOTIFY
        before, phase_started = await _xacts(admin, database), time.monotonic()
        started = time.perf_counter()
        await conn.execute(
            "INSERT INTO dl_jobs (job_id, queue, task, lock_key) "
            "SELECT gen_random_uuid(), $1, 'dl.noop', gen_random_uuid()::text FROM generate_series(1, $2)",
            QUEUE, burst)
        await _drained(conn, timeout=600)
        result["burst_drain_sec"] = round(time.perf_counter() - started, 2)
        after = await _flushed_xacts(admin, database)
        result["burst_jobs_per_sec"] = round(burst / result["burst_drain_sec"], 1)
        result["xacts_per_burst_job"] = round((after - before - tps * (time.monotonic() - phase_started)) / burst, 2)
        result["alive"] = sum(p.returncode is None for p in procs)
    finally:
        for proc in procs:
            if proc.returncode is None:
                proc.terminate()
        deadline = time.monotonic() + 60
        for proc in procs:
            try:
                await asyncio.wait_for(proc.wait(), max(0.1, deadline - time.monotonic()))
            except TimeoutError:
                proc.kill()
                await proc.wait()
        await conn.close()
        await admin.close()
    return result


async def _drained(conn: asyncpg.Connection, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while await conn.fetchval("SELECT count(*) FROM dl_jobs WHERE queue = $1 AND status IN ('queued', 'running')",
                              QUEUE):
        if time.monotonic() > deadline:
            raise RuntimeError("the fleet did not drain in time")
        await asyncio.sleep(0.1)


async def raise_max_connections(server: Server, value: int) -> None:
    """An embedded server starts with max_connections = 100: 10 nodes fit, 25 do not (about 10
    sessions each). Raised, then restarted (it takes effect at start only)."""
    conn = await asyncpg.connect(server.admin_dsn)
    try:
        if int(await conn.fetchval("SHOW max_connections")) >= value:
            return
        await conn.execute(f"ALTER SYSTEM SET max_connections = {int(value)}")
    finally:
        await conn.close()
    if server._embedded is None:
        raise SystemExit(f"bench.fifty_nodes: BENCH_DSN's max_connections is below {value}; raise it and restart")
    await asyncio.to_thread(server._embedded.restart)


async def main(args: argparse.Namespace) -> dict[str, Any]:
    server = start_server()
    out: dict[str, Any] = {"server": server.kind, "load_average_before": os.getloadavg(), "fleets": []}
    try:
        await raise_max_connections(server, 12 * max(args.nodes) + 50)
        out["max_connections"] = 12 * max(args.nodes) + 50
        for n in args.nodes:
            async with fresh_database(server, f"fleet{n}") as dsn:
                migrate = await asyncio.create_subprocess_exec(
                    sys.executable, "-m", "dataloader", "db", "upgrade", env=node_env(dsn, 1, args.src),
                    stdout=asyncio.subprocess.DEVNULL)
                if await migrate.wait() != 0:
                    raise SystemExit("bench.fifty_nodes: `dataloader db upgrade` failed")
                fleet = await measure_fleet(with_database(server.admin_dsn, "postgres"), dsn, n,
                                            concurrency=args.concurrency, window=args.window, settle=args.settle,
                                            enqueues=args.enqueues, burst=args.burst, src=args.src)
                print(json.dumps(fleet), flush=True)
                out["fleets"].append(fleet)
    finally:
        server.stop()
    out["load_average_after"] = os.getloadavg()
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / f"fifty-nodes-{datetime.now(UTC):%Y%m%dT%H%M%SZ}.json"
    path.write_text(json.dumps(out, indent=2, default=str) + "\n")
    out["file"] = str(path.relative_to(ROOT))
    return out


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=lambda s: [int(x) for x in s.split(",")], default=[10, 25, 50])
    parser.add_argument("--concurrency", type=int, default=2)
    parser.add_argument("--window", type=float, default=30)
    parser.add_argument("--settle", type=float, default=12)
    parser.add_argument("--enqueues", type=int, default=200)
    parser.add_argument("--burst", type=int, default=2000)
    parser.add_argument("--src", type=Path, default=ROOT / "src")
    print(json.dumps(asyncio.run(main(parser.parse_args())), indent=2, default=str))
