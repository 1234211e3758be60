"""PgQueuer's own statements, timed for `bench.floor` and `bench.drain_floor` (run with the peers venv).

    pgqueuer_floor.py DSN enqueue   one line per measurement on stdin: N
    pgqueuer_floor.py DSN drain     one line per measurement on stdin: N B

Both empty PgQueuer's tables first. `enqueue` times `Queries.enqueue` with lists of N (its public
batch API, as `pgqueuer_driver.py` calls it; the call's own commit included). `drain` enqueues N
no-op jobs (untimed) and VACUUM ANALYZEs the queue, then times the drain on one connection:
`Queries.dequeue(B, ...)` (its pick, which marks the jobs picked and logs them) and `Queries.log_jobs`
of the batch as successful (its completion: the delete and the log rows) until a dequeue comes back
empty. No worker loop, no handlers, no buffering: the statements a PgQueuer worker sends for the
jobs, and nothing else. Each measurement prints one JSON line: wall seconds, this process's CPU
seconds, its backend's CPU seconds (from /proc: the server must be on this machine), and for a
drain the jobs drained and the steps taken. Connecting and installing happen before the first
line is read.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
import uuid
from datetime import timedelta

import asyncpg
from pgqueuer import AsyncpgDriver, Queries
from pgqueuer.ports.repository import EntrypointExecutionParameter


def _backend_cpu_sec(pid: int) -> float:
    return int(open(f"/proc/{pid}/schedstat").read().split()[0]) / 1e9


async def _enqueue(queries: Queries, n: int) -> dict[str, float]:
    entrypoints, payloads, priorities = ["noop"] * n, [None] * n, [0] * n
    await queries.enqueue(entrypoints, payloads, priorities)
    return {}


async def _drain(conn: asyncpg.Connection, queries: Queries, n: int, batch: int) -> dict[str, float]:
    drained = steps = 0
    manager = uuid.uuid4()
    entrypoints = {"noop": EntrypointExecutionParameter(concurrency_limit=0)}
    while jobs := await queries.dequeue(batch, entrypoints, manager, None, timedelta(seconds=30)):
        await queries.log_jobs([(job, "successful", None) for job in jobs])
        drained += len(jobs)
        steps += 1
    return {"jobs": drained, "steps": steps}


async def main(dsn: str, mode: str) -> None:
    if mode not in ("enqueue", "drain"):
        raise SystemExit(f"pgqueuer_floor.py: mode must be enqueue or drain, not {mode!r}")
    conn = await asyncpg.connect(dsn)
    queries = Queries(AsyncpgDriver(conn))
    await queries.install()
    pid = await conn.fetchval("SELECT pg_backend_pid()")
    loop = asyncio.get_running_loop()
    print(json.dumps({"ready": True}), flush=True)
    while line := (await loop.run_in_executor(None, sys.stdin.readline)).strip():
        numbers = [int(x) for x in line.split()]
        await conn.execute("TRUNCATE pgqueuer, pgqueuer_log")
        if mode == "drain":
            await queries.enqueue(["noop"] * numbers[0], [None] * numbers[0], [0] * numbers[0])
            await conn.execute("VACUUM ANALYZE pgqueuer")
        db0, cpu0, t0 = _backend_cpu_sec(pid), time.process_time(), time.perf_counter()
        extra = await (_drain(conn, queries, *numbers) if mode == "drain" else _enqueue(queries, *numbers))
        wall = time.perf_counter() - t0
        print(json.dumps({"wall": wall, "client_cpu": time.process_time() - cpu0,
                          "db_cpu": _backend_cpu_sec(pid) - db0, **extra}), flush=True)
    await conn.close()


if __name__ == "__main__":
    import uvloop

    uvloop.run(main(sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else "enqueue"))
