"""The worker's busy step alone (issue #25): finish the 16 jobs the last step claimed and claim the
next 16, on one session, as two statements in a transaction (BEGIN, finish_succeeded.sql,
claim_jobs.sql, COMMIT: four round trips) against one autocommit statement
(step_succeeded_claim.sql: one round trip). No worker, no handlers: only what a step costs.

    python -m bench.step_statement [--dsn postgresql://postgres@127.0.0.1:5432/postgres] [--jobs 8000] [--rounds 3]

Without --dsn (or BENCH_DSN) it starts an embedded PostgreSQL 18 in a temporary directory (bench/pg.py).

Each round drains `--jobs` queued jobs (one lock_key each) in both modes, interleaved (the order
alternates per round), in a fresh database, and prints per mode and round: wall time per step, this
process's CPU per step (the client side: asyncpg's encoding, decoding and socket calls) and the
session's backend CPU per step (read from /proc, so the server must be on this machine). Ratios
are one-statement / two-statement within a round.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

import asyncpg

from bench.pg import start_server, with_database
from dataloader.storage import migrate
from dataloader.storage.db import connect
from dataloader.storage.queue_connection import ClaimedJob, FinishRequest, QueueConnection

_SEED = """
INSERT INTO dl_jobs (job_id, queue, task, args, lock_key, partition_key, priority, available_at, max_attempts,
                     lease_ttl_sec)
SELECT gen_random_uuid(), 'q', 't', '{}'::jsonb, 'k' || g, '', 0, now() - interval '1 hour' + g * interval '1 ms', 3, 60
FROM generate_series(1, $1) g"""

BATCH = 16


def _backend_cpu_sec(pid: int) -> float:
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _successes(jobs: list[ClaimedJob]) -> list[FinishRequest]:
    return [FinishRequest(job_id=j.job_id, attempt=j.attempt, outcome="succeeded", lock_key=j.lock_key, unlock=True)
            for j in jobs]


async def _two_statements(conn: asyncpg.Connection, queue: QueueConnection, running: list[ClaimedJob]
                          ) -> list[ClaimedJob]:
    async with conn.transaction():
        if running:
            await queue.finish(_successes(running))
        return (await queue.claim("q", "bench", BATCH)).claimed


async def _one_statement(conn: asyncpg.Connection, queue: QueueConnection, running: list[ClaimedJob]
                         ) -> list[ClaimedJob]:
    if not running:
        return (await queue.claim("q", "bench", BATCH)).claimed
    _, batch = await queue.finish_succeeded_and_claim(_successes(running), "q", "bench", BATCH)
    return batch.claimed


MODES = {"two statements": _two_statements, "one statement": _one_statement}


async def _drain(dsn: str, mode: str, jobs: int) -> dict[str, float]:
    seed = await asyncpg.connect(dsn)
    await seed.execute("TRUNCATE dl_jobs, dl_job_events")
    await seed.execute(_SEED, jobs)
    await seed.execute("VACUUM ANALYZE dl_jobs")
    await seed.execute("VACUUM ANALYZE dl_job_events")
    await seed.close()
    conn = await connect(dsn)
    pid = conn.get_server_pid()
    queue = QueueConnection(conn)
    step = MODES[mode]
    running: list[ClaimedJob] = []
    steps = 0
    cpu, client, started = _backend_cpu_sec(pid), time.process_time(), time.perf_counter()
    while True:
        running = await step(conn, queue, running)
        steps += 1
        if not running:
            break
    wall, client, cpu = time.perf_counter() - started, time.process_time() - client, _backend_cpu_sec(pid) - cpu
    await conn.close()
    return {"steps": steps, "wall_us_per_step": wall / steps * 1e6, "client_cpu_us_per_step": client / steps * 1e6,
            "db_cpu_us_per_step": cpu / steps * 1e6}


async def main(description: str = __doc__ or "", run: Callable[[str, int, int], Awaitable[None]] | None = None,
               rounds: int = 3) -> None:
    """The command line of this bench and of those built on its drain (step_schema.py): `run` gets
    the server's admin DSN, --jobs and --rounds."""
    parser = argparse.ArgumentParser(description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dsn", default=None, help="a server on this machine (default: BENCH_DSN, else embedded)")
    parser.add_argument("--jobs", type=int, default=8000)
    parser.add_argument("--rounds", type=int, default=rounds)
    args = parser.parse_args()
    if args.dsn:
        os.environ["BENCH_DSN"] = args.dsn
    server = start_server()
    try:
        await (run or _run)(server.admin_dsn, args.jobs, args.rounds)
    finally:
        server.stop()


@asynccontextmanager
async def migrated_database(admin_dsn: str, tag: str) -> AsyncIterator[str]:
    """A fresh, migrated database of the bench's own, dropped afterwards: its DSN."""
    name = f"{os.environ.get('BENCH_DB_PREFIX', 'bench')}_{tag}_{uuid.uuid4().hex[:8]}"
    admin = await asyncpg.connect(admin_dsn)
    await admin.execute(f'CREATE DATABASE "{name}"')
    try:
        dsn = with_database(admin_dsn, name)
        await migrate.upgrade(dsn)
        yield dsn
    finally:
        await admin.execute(f'DROP DATABASE "{name}" WITH (FORCE)')
        await admin.close()


async def _run(admin_dsn: str, jobs: int, rounds: int) -> None:
    async with migrated_database(admin_dsn, "step") as dsn:
        for round_ in range(rounds):
            order = list(MODES) if round_ % 2 == 0 else list(reversed(MODES))
            figures = {mode: await _drain(dsn, mode, jobs) for mode in order}
            for mode in MODES:
                print(f"round {round_} {mode:14s} " + " ".join(f"{k}={v:.1f}" for k, v in figures[mode].items()),
                      flush=True)
            one, two = figures["one statement"], figures["two statements"]
            print(f"round {round_} one/two: " + " ".join(
                f"{k}={one[k] / two[k]:.2f}" for k in ("wall_us_per_step", "client_cpu_us_per_step",
                                                       "db_cpu_us_per_step")), flush=True)


if __name__ == "__main__":
    asyncio.run(main())
