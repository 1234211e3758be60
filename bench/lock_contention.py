"""Lock-key contention: how much work is wasted when several nodes claim jobs of the same hot
lock_keys at the same instant (issue 7, item 7).

N worker processes (`dataloader worker`) drain J short jobs spread over K lock_keys. Every job
succeeds on its first real run, so each `picked` journal row beyond one per job, and each
`requeue` with reason `lock_busy`, is a claim that was made and then undone because another node
won the key. Reported: wasted claims per 100 jobs, and the drain time.

    python -m bench.lock_contention --dsn postgresql://postgres@127.0.0.1:5432/postgres
    python -m bench.lock_contention --src /path/to/other/checkout/src   # measure another version

The server must allow CREATE DATABASE; a fresh database is made and dropped per run.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import time
import uuid

import asyncpg

from bench.pg import with_database


async def _run(args: argparse.Namespace) -> dict[str, object]:
    name = f"dl_contention_{uuid.uuid4().hex[:8]}"
    admin = await asyncpg.connect(args.dsn)
    await admin.execute(f'CREATE DATABASE "{name}"')
    dsn = with_database(args.dsn, name)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DL_", "WORKERS_JSON"))}
    env.update({"DL_DB_DSN": dsn, "WORKERS_JSON": json.dumps([{"queue": "hot", "concurrency": args.concurrency}]),
                "DL_LOG_LEVEL": "WARNING", "DL_LOG_FORMAT": "json"})
    if args.src:
        env["PYTHONPATH"] = os.pathsep.join([args.src, env.get("PYTHONPATH", "")])
    workers: list[subprocess.Popen[bytes]] = []
    try:
        await asyncio.to_thread(subprocess.run, [sys.executable, "-m", "dataloader", "db", "upgrade"], env=env,
                                check=True, capture_output=True)
        conn = await asyncpg.connect(dsn)
        await conn.execute(
            "INSERT INTO dl_jobs (job_id, queue, task, lock_key, args) "
            "SELECT gen_random_uuid(), 'hot', 'dl.sleep', 'key-' || floor(random() * $2)::int, $3::jsonb "
            "FROM generate_series(1, $1) i", args.jobs, args.keys,
            json.dumps({"seconds": args.job_sec, "chunks": 1}))
        started = time.perf_counter()
        workers = [_start_worker(env) for _ in range(args.nodes)]
        while await conn.fetchval("SELECT count(*) FROM dl_jobs WHERE status <> 'succeeded'"):
            if time.perf_counter() - started > args.timeout:
                raise TimeoutError("the queue did not drain")
            await asyncio.sleep(0.1)
        elapsed = time.perf_counter() - started
        picked = await conn.fetchval("SELECT count(*) FROM dl_job_events WHERE kind = 'picked'")
        lock_busy = await conn.fetchval("SELECT count(*) FROM dl_job_events WHERE kind = 'requeue' "
                                        "AND payload->>'reason' = 'lock_busy'")
        most = await conn.fetchval("SELECT max(n) FROM (SELECT count(*) n FROM dl_job_events WHERE kind = 'picked' "
                                   "GROUP BY job_id) t")
        await conn.close()
        return {"jobs": args.jobs, "keys": args.keys, "nodes": args.nodes, "picked": picked,
                "wasted_claims": picked - args.jobs, "lock_busy_requeues": lock_busy,
                "wasted_per_100_jobs": round(100 * (picked - args.jobs) / args.jobs, 2),
                "most_picks_of_one_job": most, "drain_sec": round(elapsed, 2)}
    finally:
        for worker in workers:
            worker.terminate()
        for worker in workers:
            worker.wait(30)
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        await admin.close()


def _start_worker(env: dict[str, str]) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-m", "dataloader", "worker", "--no-reaper"], env=env)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dsn", default=os.environ.get("BENCH_DSN", "postgresql://postgres@127.0.0.1:5432/postgres"))
    parser.add_argument("--src", help="import dataloader from this src directory (another checkout)")
    parser.add_argument("--nodes", type=int, default=3)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--jobs", type=int, default=3000)
    parser.add_argument("--keys", type=int, default=100)
    parser.add_argument("--job-sec", type=float, default=0.01)
    parser.add_argument("--timeout", type=float, default=300)
    print(json.dumps(asyncio.run(_run(parser.parse_args()))))


if __name__ == "__main__":
    main()
