"""PgQueuer's own batch insert, timed one call at a time for `bench.floor` (run with the peers venv).

Reads one line per measurement from stdin (the batch size N), empties PgQueuer's tables, then times
`Queries.enqueue` with lists of N (its public batch API, as `pgqueuer_driver.py` calls it) and
prints one JSON line: wall seconds (the call, its own commit included), this process's CPU
seconds, and the CPU seconds of its backend (from /proc: the server must be on this machine).
Connecting and installing happen before the first line is read.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time

import asyncpg
from pgqueuer import AsyncpgDriver, Queries


def _backend_cpu_sec(pid: int) -> float:
    return int(open(f"/proc/{pid}/schedstat").read().split()[0]) / 1e9


async def main(dsn: str) -> None:
    conn = await asyncpg.connect(dsn)
    queries = Queries(AsyncpgDriver(conn))
    await queries.install()
    pid = await conn.fetchval("SELECT pg_backend_pid()")
    loop = asyncio.get_running_loop()
    print(json.dumps({"ready": True}), flush=True)
    while line := (await loop.run_in_executor(None, sys.stdin.readline)).strip():
        n = int(line)
        await conn.execute("TRUNCATE pgqueuer, pgqueuer_log")
        entrypoints, payloads, priorities = ["noop"] * n, [None] * n, [0] * n
        db0, cpu0, t0 = _backend_cpu_sec(pid), time.process_time(), time.perf_counter()
        await queries.enqueue(entrypoints, payloads, priorities)
        wall = time.perf_counter() - t0
        print(json.dumps({"wall": wall, "client_cpu": time.process_time() - cpu0,
                          "db_cpu": _backend_cpu_sec(pid) - db0}), flush=True)
    await conn.close()


if __name__ == "__main__":
    import uvloop

    uvloop.run(main(sys.argv[1]))
