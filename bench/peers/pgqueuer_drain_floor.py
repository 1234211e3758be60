"""PgQueuer's own claim and completion statements, timed as one drain for `bench.drain_floor` (run
with the peers venv).

Reads one line per measurement from stdin (the number of jobs N and the batch size B), empties
PgQueuer's tables, enqueues N no-op jobs (`Queries.enqueue` with lists, untimed) and VACUUM
ANALYZEs the queue, then times the drain on one connection: `Queries.dequeue(B, ...)` (its pick,
which marks the jobs picked and logs them) and `Queries.log_jobs` of the batch as successful (its
completion: the delete and the log rows) until a dequeue comes back empty. No worker loop, no
handlers, no buffering: the statements a PgQueuer worker sends for the jobs, and nothing else.
Prints one JSON line: wall seconds, this process's CPU seconds, its backend's CPU seconds (from
/proc: the server must be on this machine), the jobs drained and the steps taken.
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


async def main(dsn: str) -> None:
    conn = await asyncpg.connect(dsn)
    queries = Queries(AsyncpgDriver(conn))
    await queries.install()
    pid = await conn.fetchval("SELECT pg_backend_pid()")
    manager = uuid.uuid4()
    entrypoints = {"noop": EntrypointExecutionParameter(concurrency_limit=0)}
    loop = asyncio.get_running_loop()
    print(json.dumps({"ready": True}), flush=True)
    while line := (await loop.run_in_executor(None, sys.stdin.readline)).strip():
        n, batch = (int(x) for x in line.split())
        await conn.execute("TRUNCATE pgqueuer, pgqueuer_log")
        await queries.enqueue(["noop"] * n, [None] * n, [0] * n)
        await conn.execute("VACUUM ANALYZE pgqueuer")
        drained = steps = 0
        db0, cpu0, t0 = _backend_cpu_sec(pid), time.process_time(), time.perf_counter()
        while jobs := await queries.dequeue(batch, entrypoints, manager, None, timedelta(seconds=30)):
            await queries.log_jobs([(job, "successful", None) for job in jobs])
            drained += len(jobs)
            steps += 1
        wall = time.perf_counter() - t0
        print(json.dumps({"wall": wall, "client_cpu": time.process_time() - cpu0,
                          "db_cpu": _backend_cpu_sec(pid) - db0, "jobs": drained, "steps": steps}), flush=True)
    await conn.close()


if __name__ == "__main__":
    import uvloop

    uvloop.run(main(sys.argv[1]))
