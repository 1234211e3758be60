"""What keeping cached plans safe costs (issue 27, part 1): the queue worker's step (claim 16,
heartbeat them, finish them) on one session, with its statements' plans as dataloader caches them
against the same loop with every call planned anew (`plan_cache_mode = force_custom_plan`, the
obvious cure for a plan made while dl_jobs was empty), and a burst after an idle start.

    python -m bench.plan_modes --dsn postgresql://postgres@127.0.0.1:5432/postgres [--jobs 8000] [--rounds 2]

Each round drains `--jobs` queued jobs (one lock_key each) in every mode, interleaved, in a fresh
database, and prints per mode: wall time and the session's backend CPU per job (read from /proc, so
the server must be on this machine), and the mean claim / heartbeat / finish call. Then the burst:
a session that ran the step on the empty (analyzed) table, then `--burst` jobs queued, against a
session opened after the burst: shared buffers read per step (pg_stat_database), the measure
tests/storage/test_plan_stability.py holds within 2x.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import time
import uuid

import asyncpg

from bench.pg import with_database
from dataloader.storage import migrate, plan_epoch
from dataloader.storage.db import connect
from dataloader.storage.queue_connection import FinishRequest, QueueConnection

_SEED = """
INSERT INTO dl_jobs (job_id, queue, task, args, lock_key, partition_key, priority, available_at, max_attempts,
                     lease_ttl_sec)
SELECT gen_random_uuid(), 'q', 't', '{}'::jsonb, 'k' || g, '', 0, now() - interval '1 hour' + g * interval '1 ms', 3, 60
FROM generate_series(1, $1) g"""


def _backend_cpu_sec(pid: int) -> float:
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def _step(queue: QueueConnection, times: dict[str, float]) -> int:
    started = time.perf_counter()
    batch = await queue.claim("q", "bench", 16)
    times["claim"] += time.perf_counter() - started
    if not batch.claimed:
        return 0
    started = time.perf_counter()
    await queue.heartbeat([(j.job_id, j.attempt) for j in batch.claimed])
    times["heartbeat"] += time.perf_counter() - started
    started = time.perf_counter()
    await queue.finish([FinishRequest(job_id=j.job_id, attempt=j.attempt, outcome="succeeded", lock_key=j.lock_key,
                                      unlock=True) for j in batch.claimed])
    times["finish"] += time.perf_counter() - started
    return len(batch.claimed)


async def _drain(dsn: str, mode: str, jobs: int) -> dict[str, float]:
    seed = await asyncpg.connect(dsn)
    await seed.execute("TRUNCATE dl_jobs, dl_job_events")
    await seed.execute(_SEED, jobs)
    await seed.execute("VACUUM ANALYZE dl_jobs")
    await seed.execute("VACUUM ANALYZE dl_job_events")
    await seed.close()
    settings = {} if mode == "cached" else {"plan_cache_mode": "force_custom_plan"}
    conn = await connect(dsn, server_settings=settings)
    pid = conn.get_server_pid()
    queue = QueueConnection(conn)
    times = {"claim": 0.0, "heartbeat": 0.0, "finish": 0.0}
    done, steps = 0, 0
    cpu, started = _backend_cpu_sec(pid), time.perf_counter()
    while claimed := await _step(queue, times):
        done += claimed
        steps += 1
    wall, cpu = time.perf_counter() - started, _backend_cpu_sec(pid) - cpu
    await conn.close()
    return {"wall_us_per_job": wall / done * 1e6, "db_cpu_us_per_job": cpu / done * 1e6,
            **{f"{k}_ms_per_call": v / steps * 1e3 for k, v in times.items()}}


async def _buffers(conn: asyncpg.Connection, observer: asyncpg.Connection) -> int:
    await conn.execute("SELECT pg_stat_force_next_flush()")
    await conn.execute("SELECT 1")
    await observer.execute("SELECT pg_stat_clear_snapshot()")
    return await observer.fetchval(
        "SELECT blks_hit + blks_read FROM pg_stat_database WHERE datname = current_database()")


async def _burst(dsn: str, burst: int) -> dict[str, float]:
    seed = await asyncpg.connect(dsn)
    await seed.execute("TRUNCATE dl_jobs, dl_job_events")
    await seed.execute("ANALYZE dl_jobs")
    plan_epoch.reset()
    warmed = await connect(dsn)
    queue = QueueConnection(warmed)
    times = {"claim": 0.0, "heartbeat": 0.0, "finish": 0.0}
    for _ in range(8):
        await _step(queue, times)
    await seed.execute(_SEED, burst)
    result = {}
    for name, conn in (("warmed", warmed), ("fresh", None)):
        conn = conn or await connect(dsn)
        queue = QueueConnection(conn)
        if name == "fresh":
            for _ in range(8):
                await _step(queue, times)
        before, started = await _buffers(conn, seed), time.perf_counter()
        for _ in range(10):
            await _step(queue, times)
        result[f"{name}_buffers_per_step"] = (await _buffers(conn, seed) - before) / 10
        result[f"{name}_ms_per_step"] = (time.perf_counter() - started) / 10 * 1e3
        await conn.close()
    await seed.close()
    return result


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dsn", required=True)
    parser.add_argument("--jobs", type=int, default=8000)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--burst", type=int, default=20000)
    args = parser.parse_args()
    name = f"bench_plan_{uuid.uuid4().hex[:8]}"
    admin = await asyncpg.connect(args.dsn)
    await admin.execute(f'CREATE DATABASE "{name}"')
    dsn = with_database(args.dsn, name)
    try:
        await migrate.upgrade(dsn)
        conn = await asyncpg.connect(dsn)
        # the burst's buffer counts are the database's: no autovacuum pass may add to them
        for table in await conn.fetch("SELECT tablename FROM pg_tables WHERE tablename LIKE 'dl\\_%'"):
            await conn.execute(f'ALTER TABLE "{table[0]}" SET (autovacuum_enabled = false)')
        await conn.close()
        for round_ in range(args.rounds):
            for mode in ("cached", "custom"):
                figures = await _drain(dsn, mode, args.jobs)
                print(f"round {round_} {mode:7s} " + " ".join(f"{k}={v:.2f}" for k, v in figures.items()), flush=True)
        burst = await _burst(dsn, args.burst)
        print("burst " + " ".join(f"{k}={v:.1f}" for k, v in burst.items()))
    finally:
        await admin.execute(f'DROP DATABASE "{name}" WITH (FORCE)')
        await admin.close()


if __name__ == "__main__":
    asyncio.run(main())
