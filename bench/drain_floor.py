"""The floor of the drain (issue 38): what the server itself needs per job to claim and finish jobs
while keeping our promises, beside our own step statement and PgQueuer's dequeue and completion,
interleaved on one server. No worker, no handlers: one session drains N queued no-op jobs in steps
of B (finish the last step's jobs and claim the next B), and the figure is the CPU per job of that
session's backend.

    python -m bench.drain_floor [--dsn postgresql://postgres@127.0.0.1:5432/postgres] [--jobs 8000]
                                [--batch 16] [--rounds 5] [--only SUBSTRING]

Without --dsn (or BENCH_DSN) it starts an embedded PostgreSQL 18 (bench/pg.py). One fresh, migrated
database; the hand-written variants run on scratch copies of `dl_jobs` and `dl_job_events` built
as bench/floor.py builds them (every index of the migrated tables, the journal's foreign key), each
step one autocommit statement, as ours is:

  bare                 the finish (status, finished_at, fenced by attempt) and the claim (the walk
                       of ix_dl_jobs_claim_order, FOR UPDATE SKIP LOCKED, attempt + 1, lease):
                       what any queue with a status column does, without our promises;
  + one holder per key promise 2: the claim's running-key probe, the key's advisory lock and the
                       probe again after it (0044's check in a fresh snapshot, a plpgsql function
                       like dl_take_key), and the finish's unlock;
  + journal (FK)       promise 4: a 'picked' row per claim and a 'succeeded' row per finish, in
                       the same statement, each checked by the journal's foreign key: the promise
                       floor;
  promise floor without fk   what the foreign key's check costs of it.

  ours                 `QueueConnection.finish_succeeded_and_claim` (step_succeeded_claim.sql,
                       what a busy worker sends) on the migrated tables;
  ours without X       diagnostics, not alternatives: our statement with one part cut out (its
                       semantics lost), to show where our cost above the floor goes: the finish's
                       wake-up of a freed key's waiters, its unpark probe, the claim's key-backlog
                       probe, the claim fence, the journal payloads, the table size, dl_take_keys'
                       check after the locks (plain advisory locks instead);
  pgqueuer             `Queries.dequeue(B)` and `Queries.log_jobs` of the batch on PgQueuer's own
                       tables, in its own process and venv (bench/peers/pgqueuer_floor.py, drain).

Every round drains once with every variant, in an order rotated per round; each drain starts from
N freshly inserted jobs (one lock_key each), VACUUM ANALYZEd, untimed. Figures: medians over the
rounds of wall, client CPU and backend CPU, per job. Results: bench/results/drain-floor-<UTC>.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import statistics
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from unittest.mock import patch

import asyncpg

from bench import floor
from bench.step_statement import migrated_database
from dataloader.storage import queue_connection
from dataloader.storage.db import connect
from dataloader.storage.queue_connection import FinishRequest, QueueConnection, step_claim_sql

ROOT = Path(__file__).resolve().parent.parent

_SEED = """
INSERT INTO {table} (job_id, queue, task, args, lock_key, partition_key, priority, available_at, max_attempts,
                     lease_ttl_sec)
SELECT gen_random_uuid(), 'q', 't', '{{}}'::jsonb, 'k' || g, '', 0, now() - interval '1 hour' + g * interval '1 ms',
       3, 60
FROM generate_series(1, $1) g"""

# promise 2's check after the lock, as dl_take_key makes it (0044), on the scratch table
_TAKE_KEY = """
CREATE FUNCTION {s}.take_key(p_lock_key text) RETURNS boolean LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    IF NOT pg_try_advisory_lock(hashtext(p_lock_key)) THEN
        RETURN false;
    END IF;
    IF EXISTS (SELECT 1 FROM {s}.jobs r
               WHERE r.lock_key = p_lock_key AND (r.status IN ('queued', 'running')) IS TRUE
                 AND COALESCE(r.status = 'running', false)) THEN
        PERFORM pg_advisory_unlock(hashtext(p_lock_key));
        RETURN false;
    END IF;
    RETURN true;
END
$$"""

_KEY_FREE = """
      AND NOT EXISTS (SELECT 1 FROM {s}.jobs r
                      WHERE r.lock_key = q.lock_key || '' AND (r.status IN ('queued', 'running')) IS TRUE
                        AND COALESCE(r.status = 'running', false) OFFSET 0)"""


def step_statement(schema: str, batch: int, *, keys: bool, journal: bool) -> str:
    """One step of a hand-written variant: finish the attempts $1 (ids) / $2 (attempts) and claim
    up to `batch` jobs; answers one row with the claimed ids, attempts and keys."""
    s = schema
    unlock = "(SELECT count(pg_advisory_unlock(hashtext(d.lock_key))) FROM done d)" if keys else "0"
    take = f"WHERE {s}.take_key(c.lock_key)" if keys else ""
    done_journal = (f""", done_journal AS (
    INSERT INTO {s}.events (job_id, queue, kind, payload)
    SELECT job_id, queue, 'succeeded', '{{}}'::jsonb FROM done
)""" if journal else "")
    claimed_journal = (f""", claimed_journal AS (
    INSERT INTO {s}.events (job_id, queue, kind, payload)
    SELECT job_id, queue, 'picked', '{{}}'::jsonb FROM claimed
)""" if journal else "")
    return f"""
WITH done AS (
    UPDATE {s}.jobs j SET status = 'succeeded', finished_at = now(), lease_expires_at = NULL
    FROM unnest($1::uuid[], $2::int[]) AS f(job_id, attempt)
    WHERE j.job_id = f.job_id AND j.attempt = f.attempt AND j.status = 'running'
    RETURNING j.job_id, j.queue, j.lock_key
){done_journal}, candidate AS (
    SELECT q.job_id, q.lock_key FROM {s}.jobs q
    WHERE q.status = 'queued' AND q.queue = 'q' AND q.available_at <= now() AND NOT q.key_parked
      {_KEY_FREE.format(s=s) if keys else ""}
    ORDER BY q.priority, q.available_at, q.created_at
    LIMIT {batch}
    FOR UPDATE SKIP LOCKED
), locked AS MATERIALIZED (
    SELECT c.job_id FROM candidate c {take}
), claimed AS (
    UPDATE {s}.jobs j SET status = 'running', attempt = j.attempt + 1, started_at = now(),
                          lease_expires_at = now() + make_interval(secs => j.lease_ttl_sec)
    FROM locked l WHERE j.job_id = l.job_id
    RETURNING j.job_id, j.queue, j.attempt, j.lock_key
){claimed_journal}
SELECT {unlock} AS unlocked, array_agg(job_id) AS ids, array_agg(attempt) AS attempts FROM claimed"""


# What each diagnostic cuts out of step_succeeded_claim.sql: (pattern, replacement), a regex.
CUTS: dict[str, tuple[str, str]] = {
    "the waiters' wake-up": (r"waiters AS \(.*?\n\), unparked", "waiters AS (SELECT 1 WHERE false\n), unparked"),
    "the unpark probe": (r"unparked AS \(.*?\n\), unlocked", "unparked AS (SELECT 0 AS woken\n), unlocked"),
    "the key-backlog probe": (r"LEFT JOIN LATERAL \(\n    SELECT count\(\*\).*?\) k ON true",
                              "LEFT JOIN LATERAL (SELECT false AS backlog, false AS parked) k ON true"),
    "the claim fence": (re.escape("SELECT dl_claim_fence($1) AS paused_tasks"),
                        "SELECT ARRAY[]::text[] AS paused_tasks"),
    "the journal payloads": (r"jsonb_build_object\('attempt', (?:e|c)\.attempt(?:, 'worker', \$2::text, 'session', "
                             r"pg_backend_pid\(\))?\)", "(CASE WHEN $2::text = '' THEN '{}' ELSE '{}' END)::jsonb"),
    "the table size": (re.escape("(SELECT (pg_relation_size('dl_jobs'::regclass) / "
                                 "current_setting('block_size')::int)::int)"), "0"),
    "dl_take_keys' check after the locks": (
        re.escape("dl_take_keys(ARRAY(SELECT r.lock_key FROM ranked r WHERE r.key_rank = 1),\n"
                  "                        (SELECT f.jobs FROM finishing f), (SELECT f.attempts FROM finishing f))"),
        "ARRAY(SELECT r.lock_key FROM ranked r WHERE r.key_rank = 1 AND pg_try_advisory_lock(hashtext(r.lock_key)))"),
}


def cut_statement(limit: int, cut: str) -> str:
    pattern, replacement = CUTS[cut]
    text, count = re.subn(pattern, lambda _: replacement, step_claim_sql(limit), flags=re.S)
    assert count, f"{cut}: its part is no longer in step_succeeded_claim.sql"
    return text


@dataclass(frozen=True)
class Variant:
    name: str
    shape: str  # floor | ours | pgqueuer
    keys: bool = False
    journal: bool = False
    fk: bool = True
    schema: str = ""
    cut: str | None = None  # ours: the diagnostic's part cut out (CUTS)


def variants() -> list[Variant]:
    out = [
        Variant("bare: finish + claim, no journal, no key lock", "floor"),
        Variant("+ one holder per key (probe, advisory lock, probe after it)", "floor", keys=True),
        Variant("promise floor: + journal rows in the statement (FK)", "floor", keys=True, journal=True),
        Variant("promise floor without fk", "floor", keys=True, journal=True, fk=False),
        Variant("ours: finish_succeeded_and_claim (step_succeeded_claim.sql)", "ours"),
        *[Variant(f"ours without {cut}", "ours", cut=cut) for cut in CUTS],
        Variant("pgqueuer: Queries.dequeue + Queries.log_jobs", "pgqueuer"),
    ]
    return [Variant(v.name, v.shape, v.keys, v.journal, v.fk, f"drain_floor_{i}", v.cut) for i, v in enumerate(out)]


def _cpu_sec(pid: int) -> float:
    return int(open(f"/proc/{pid}/schedstat").read().split()[0]) / 1e9


async def _build(control: asyncpg.Connection, v: Variant) -> None:
    await floor._build_schema(control, floor.Variant(v.name, "unnest", leave_out=frozenset(
        {"trigger"} | (set() if v.fk else {"fk"})), schema=v.schema))
    await control.execute(_TAKE_KEY.format(s=v.schema))


@dataclass
class Runner:
    control: asyncpg.Connection
    dsn: str
    jobs: int
    batch: int
    pgqueuer: subprocess.Popen[str] | None = None

    async def seed(self, v: Variant) -> None:
        table = "dl_jobs" if v.shape == "ours" else f"{v.schema}.jobs"
        events = "dl_job_events" if v.shape == "ours" else f"{v.schema}.events"
        await self.control.execute(f"TRUNCATE {table}, {events} CASCADE")
        await self.control.execute(_SEED.format(table=table), self.jobs)
        await self.control.execute(f"VACUUM ANALYZE {table}")
        await self.control.execute(f"VACUUM ANALYZE {events}")

    async def one(self, v: Variant) -> dict[str, float]:
        if v.shape == "pgqueuer":
            assert self.pgqueuer is not None and self.pgqueuer.stdin and self.pgqueuer.stdout
            self.pgqueuer.stdin.write(f"{self.jobs} {self.batch}\n")
            self.pgqueuer.stdin.flush()
            figures = json.loads(await asyncio.to_thread(self.pgqueuer.stdout.readline))
            assert figures["jobs"] == self.jobs, figures
            return {"wall": figures["wall"], "client_cpu": figures["client_cpu"], "db_cpu": figures["db_cpu"],
                    "steps": figures["steps"]}
        await self.seed(v)
        conn = await connect(self.dsn) if v.shape == "ours" else await asyncpg.connect(self.dsn)
        try:
            pid = conn.get_server_pid()
            drained = steps = 0
            db0, cpu0, t0 = _cpu_sec(pid), time.process_time(), time.perf_counter()
            if v.shape == "ours":
                drained, steps = await self._drain_ours(conn, v.cut)
            else:
                drained, steps = await self._drain_floor(conn, v)
            wall, client, db = time.perf_counter() - t0, time.process_time() - cpu0, _cpu_sec(pid) - db0
        finally:
            await conn.close()
        assert drained == self.jobs, (v.name, drained)
        return {"wall": wall, "client_cpu": client, "db_cpu": db, "steps": steps}

    async def _drain_ours(self, conn: asyncpg.Connection, cut: str | None) -> tuple[int, int]:
        queue = QueueConnection(conn)
        running = (await queue.claim("q", "bench", self.batch)).claimed
        drained, steps = len(running), 1
        while running:
            done = [FinishRequest(job_id=j.job_id, attempt=j.attempt, outcome="succeeded", lock_key=j.lock_key,
                                  unlock=True) for j in running]
            if cut is None:
                _, claimed = await queue.finish_succeeded_and_claim(done, "q", "bench", self.batch)
            else:
                with patch.object(queue_connection, "step_claim_sql", lambda limit: cut_statement(limit, cut)):
                    _, claimed = await queue.finish_succeeded_and_claim(done, "q", "bench", self.batch)
            running = claimed.claimed
            drained += len(running)
            steps += 1
        return drained, steps

    async def _drain_floor(self, conn: asyncpg.Connection, v: Variant) -> tuple[int, int]:
        statement = await conn.prepare(step_statement(v.schema, self.batch, keys=v.keys, journal=v.journal))
        ids: list[Any] = []
        attempts: list[int] = []
        drained = steps = 0
        while True:
            row = await statement.fetchrow(ids, attempts)
            steps += 1
            if not row["ids"]:
                return drained, steps
            ids, attempts = row["ids"], row["attempts"]
            drained += len(ids)


async def _run(admin_dsn: str, jobs: int, batch: int, rounds: int, only: str | None) -> dict[str, Any]:
    chosen = [v for v in variants() if only is None or only in v.name]
    async with migrated_database(admin_dsn, "drainfloor") as dsn:
        control = await asyncpg.connect(dsn)
        info = {"server_version": await control.fetchval("SHOW server_version"),
                "fsync": await control.fetchval("SHOW fsync"),
                "synchronous_commit": await control.fetchval("SHOW synchronous_commit"),
                "jobs": jobs, "batch": batch}
        for v in chosen:
            if v.shape == "floor":
                await _build(control, v)
        runner = Runner(control, dsn, jobs, batch)
        if any(v.shape == "pgqueuer" for v in chosen):
            runner.pgqueuer = await floor.start_pgqueuer(dsn, "drain")
        try:
            warm = Runner(control, dsn, max(batch * 4, 64), batch, runner.pgqueuer)
            for v in chosen:  # a warm-up of every statement (plans, caches), not recorded
                await warm.one(v)
            samples: dict[str, list[dict[str, float]]] = {v.name: [] for v in chosen}
            loads = []
            for round_ in range(rounds):
                load_start = os.getloadavg()
                k = round_ % len(chosen)
                for v in chosen[k:] + chosen[:k]:
                    samples[v.name].append(await runner.one(v))
                loads.append({"round": round_, "start": load_start, "end": os.getloadavg()})
                print(f"round {round_} done, load {load_start[0]:.1f} -> {os.getloadavg()[0]:.1f}", flush=True)
        finally:
            if runner.pgqueuer is not None:
                runner.pgqueuer.stdin.close()  # type: ignore[union-attr]
                runner.pgqueuer.wait(timeout=30)
            await control.close()
    table = [{"variant": v.name, "rounds": len(samples[v.name]),
              "jobs_per_s": jobs / statistics.median(r["wall"] for r in samples[v.name]),
              **{f"{k}_us_per_job": statistics.median(r[k] for r in samples[v.name]) / jobs * 1e6
                 for k in ("wall", "client_cpu", "db_cpu")},
              "runs": samples[v.name]} for v in chosen]
    return {"info": info, "loads": loads, "table": table}


def _print(result: dict[str, Any]) -> None:
    print(f"\nPostgreSQL {result['info']['server_version']}, {result['info']['jobs']:,} jobs in steps of "
          f"{result['info']['batch']}, loads " + ", ".join(f"{x['start'][0]:.1f}-{x['end'][0]:.1f}"
                                                           for x in result["loads"]))
    print("| variant | jobs/s | wall µs/job | client CPU µs/job | server CPU µs/job |\n|---|---|---|---|---|")
    for row in result["table"]:
        print(f"| {row['variant']} | {row['jobs_per_s']:,.0f} | {row['wall_us_per_job']:.1f} | "
              f"{row['client_cpu_us_per_job']:.1f} | {row['db_cpu_us_per_job']:.1f} |")


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dsn", default=None, help="a server on this machine (default: BENCH_DSN, else embedded)")
    parser.add_argument("--jobs", type=int, default=8000)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--only", default=None, help="only the variants whose name contains this")
    args = parser.parse_args()
    await floor.run_and_record(args.dsn, lambda dsn: _run(dsn, args.jobs, args.batch, args.rounds, args.only),
                               printer=_print, name="drain-floor")


if __name__ == "__main__":
    asyncio.run(main())
