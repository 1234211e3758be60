"""The chaos suite's pipelines (loaded by node processes through DL_PIPELINE_MODULES).

Why a pipeline of its own: the engine's promise "one holder per lock_key" must be checked by
something that does not trust the engine. Every run takes a *probe* lock for its lock_key on a
dedicated connection, in a lock space the engine never uses (the two-int4 form
`pg_try_advisory_lock(PROBE_CLASS_ID, hashtext(lock_key))`, separate from the engine's one-bigint
`pg_try_advisory_lock(hashtext(lock_key))`), holds it for the whole run and records the run in
`chaos_runs`. If two runs of one key ever overlap, the second one cannot take the probe and records
`probe_ok = false`. The pipeline never raises on purpose, so any failed attempt or `retry` in the
journal is the engine's doing (or the database's), not the workload's.

When the probe connection is lost (a PostgreSQL restart drops every session lock), the run
reconnects and takes the probe again before its next chunk; a refusal then counts in
`reprobe_failed` (someone else started the key while this run was still going).
"""

from __future__ import annotations

import asyncio
import os
import time
from typing import Any

import asyncpg

from dataloader import JobContext, pipeline

# int4 class id of the probe's lock space ("chaos" on a phone keypad: 24267).
PROBE_CLASS_ID = 24267
TASK = "chaos.work"

RUNS_DDL = """
CREATE TABLE IF NOT EXISTS chaos_runs (
    id bigserial PRIMARY KEY,
    job_id uuid NOT NULL,
    lock_key text NOT NULL,
    attempt int NOT NULL,
    pid int NOT NULL,
    node text NOT NULL,
    started_at timestamptz NOT NULL,
    ended_at timestamptz,
    outcome text,                          -- completed | stopped | NULL: the process died
    probe_ok boolean NOT NULL,             -- the probe lock was free when the run started
    probe_lost int NOT NULL DEFAULT 0,     -- the probe connection dropped and was re-taken
    reprobe_failed int NOT NULL DEFAULT 0  -- ... and the key was held by someone else then
);
CREATE INDEX IF NOT EXISTS ix_chaos_runs_job ON chaos_runs (job_id);
"""

LOCK_SQL = "SELECT pg_try_advisory_lock($1::int4, hashtext($2))"
UNLOCK_SQL = "SELECT pg_advisory_unlock($1::int4, hashtext($2))"

# Errors that mean "the database is not reachable right now", not "this statement is wrong".
CONNECTION_ERRORS: tuple[type[BaseException], ...] = (
    OSError, TimeoutError, asyncpg.PostgresConnectionError, asyncpg.InterfaceError,
    asyncpg.CannotConnectNowError, asyncpg.AdminShutdownError, asyncpg.CrashShutdownError,
    asyncpg.InternalClientError,
)
RECONNECT_DEADLINE_SEC = 180.0


class Probe:
    """The run's own connection: holds the probe lock and writes the run's row."""

    def __init__(self, dsn: str, lock_key: str) -> None:
        self.dsn = dsn
        self.lock_key = lock_key
        self.conn: asyncpg.Connection | None = None
        self.probe_ok: bool | None = None
        self.held = False
        self.lost = 0
        self.reprobe_failed = 0

    async def ensure_held(self) -> None:
        """(Re)connect and take the probe lock if the connection is gone; never raises before the
        reconnect deadline, so a database restart does not fail the run."""
        if self.conn is not None and not self.conn.is_closed():
            return
        if self.conn is not None:
            self.conn.terminate()
            self.conn = None
            self.held = False
            self.lost += 1
        deadline = time.monotonic() + RECONNECT_DEADLINE_SEC
        while True:
            try:
                conn = await asyncpg.connect(self.dsn, timeout=5)
            except CONNECTION_ERRORS:
                if time.monotonic() > deadline:
                    raise
                await asyncio.sleep(0.2)
                continue
            try:
                got = bool(await conn.fetchval(LOCK_SQL, PROBE_CLASS_ID, self.lock_key, timeout=10))
            except CONNECTION_ERRORS:
                conn.terminate()
                if time.monotonic() > deadline:
                    raise
                await asyncio.sleep(0.2)
                continue
            except BaseException:
                # cancelled (the run was stopped) while asking: the session, and the lock it may have
                # got, must end here, or it would stay held by a connection no one closes
                conn.terminate()
                raise
            break
        self.conn, self.held = conn, got
        if self.probe_ok is None:
            self.probe_ok = got
        elif not got:
            self.reprobe_failed += 1

    async def record_start(self, run_of: Any, attempt: int) -> int:
        """The run's `chaos_runs` row (database clock), written on the probe connection: its id."""
        return await self.fetchval(
            "INSERT INTO chaos_runs (job_id, lock_key, attempt, pid, node, started_at, probe_ok) "
            "VALUES ($1, $2, $3, $4, $5, clock_timestamp(), $6) RETURNING id",
            run_of, self.lock_key, attempt, os.getpid(), os.environ.get("DL_NODE_NAME", "in-process"),
            bool(self.probe_ok))

    async def record_end_and_close(self, run_id: int, outcome: str) -> None:
        """The run's end and what its probe saw, then the probe connection closes. The end is the
        moment the run stopped, by this host's clock (the database's is the same clock: one machine):
        a run stopped while the database was away (its lease lost in a failover) writes it once the
        database is back, and that later moment is not when it stopped. Written on the probe's
        connection when it still lives, else on a connection of its own: a stopped run never takes
        the probe again."""
        ended_at = time.time()
        sql = ("UPDATE chaos_runs SET ended_at = to_timestamp($5), outcome = $2, probe_lost = $3, "
               "reprobe_failed = $4 WHERE id = $1 RETURNING id")
        try:
            if self.conn is not None and not self.conn.is_closed():
                try:
                    await self.conn.fetchval(sql, run_id, outcome, self.lost, self.reprobe_failed, ended_at,
                                             timeout=10)
                    return
                except CONNECTION_ERRORS:
                    pass
            await self._write_elsewhere(sql, run_id, outcome, self.lost, self.reprobe_failed, ended_at)
        finally:
            await self.close()

    async def _write_elsewhere(self, sql: str, *args: Any) -> None:
        """One statement on a connection that takes no lock, retried until the reconnect deadline."""
        deadline = time.monotonic() + RECONNECT_DEADLINE_SEC
        while True:
            try:
                conn = await asyncpg.connect(self.dsn, timeout=5)
                try:
                    await conn.fetchval(sql, *args, timeout=10)
                    return
                finally:
                    conn.terminate()
            except CONNECTION_ERRORS:
                if time.monotonic() > deadline:
                    raise
                await asyncio.sleep(0.2)

    async def fetchval(self, sql: str, *args: Any) -> Any:
        """One statement on the probe connection, retried across reconnects. An argument may be a
        callable, evaluated per try (counters that a reconnect in this very call may change)."""
        deadline = time.monotonic() + RECONNECT_DEADLINE_SEC
        while True:
            await self.ensure_held()
            assert self.conn is not None
            try:
                values = [a() if callable(a) else a for a in args]
                return await self.conn.fetchval(sql, *values, timeout=10)
            except CONNECTION_ERRORS:
                if time.monotonic() > deadline:
                    raise
                self.conn.terminate()  # ensure_held reconnects (and counts the loss)
                await asyncio.sleep(0.1)

    async def close(self) -> None:
        if self.conn is None:
            return
        try:
            if self.held and not self.conn.is_closed():
                await self.conn.fetchval(UNLOCK_SQL, PROBE_CLASS_ID, self.lock_key, timeout=5)
            await self.conn.close(timeout=5)
        except BaseException as exc:
            # a lost connection, or cancelled while closing: the session (and its lock) ends with the
            # connection; never leave it open
            self.conn.terminate()
            if not isinstance(exc, CONNECTION_ERRORS):
                raise
        finally:
            self.conn = None
            self.held = False


def chaos_dsn(args: dict[str, Any]) -> str:
    """The probe's database: `args.dsn` (in-process tests), else the node's own DL_DB_DSN."""
    dsn = args.get("dsn") or os.environ.get("CHAOS_DSN") or os.environ.get("DL_DB_DSN")
    if not dsn:
        raise RuntimeError("chaos.work needs args.dsn, CHAOS_DSN or DL_DB_DSN")
    return str(dsn).replace("postgresql+asyncpg://", "postgresql://", 1)


@pipeline(TASK)
async def chaos_work(ctx: JobContext):
    """`args.chunks` chunks of `args.chunk_ms` each; reports progress after every chunk; holds the
    probe lock of its lock_key from before its first chunk until after its last."""
    chunks = int(ctx.args.get("chunks", 5))
    chunk_sec = float(ctx.args.get("chunk_ms", 100)) / 1000
    probe = Probe(chaos_dsn(ctx.args), ctx.lock_key)
    run_id = None
    outcome = "stopped"
    try:
        # inside the try: a run stopped (cancelled) while taking its probe or writing its row must
        # still close the probe, or its lock would be held by a connection no one closes
        await probe.ensure_held()
        run_id = await probe.record_start(ctx.job_id, ctx.attempt)
        for chunk in range(chunks):
            await asyncio.sleep(chunk_sec)
            await probe.ensure_held()
            await ctx.progress({"chunk": chunk + 1, "of": chunks})
            yield
        outcome = "completed"
    finally:
        if run_id is None:
            await probe.close()
        else:
            await probe.record_end_and_close(run_id, outcome)


# -- the other capabilities under the same chaos (processes, observers) ----------------------------
#
# Their code is in node_capabilities.py, loaded by the nodes only (DL_PIPELINE_MODULES): importing it
# registers a processor and an observer kind, which would change every App.running() of a test
# process that imported it (its queues, its kinds). Here only the names and the table.
#
# Processes: namespace "chaos". Every step holds the probe lock of its process ("process:chaos:<id>",
# the same key as the task's lock_key, in the probe's lock space) and records itself in chaos_runs
# like a job's run (job_id = the task's id), so "one running step per process at a time" is checked
# exactly like "one holder per lock_key". A call appends {"kind": "call", "seq": n} and counts it in
# aux_state; the timer re-arms itself every `timer_sec` and counts its firings.
#
# Observers: kind "chaos.watch". Each run holds the probe lock of "observer:<name>" and records a
# row of chaos_observer_runs (name, epoch, node) with a heartbeat (`last_beat_at`, database clock)
# every BEAT_SEC; the harness checks that no two runs of one name overlap in time.

PROCESS_NS = "chaos"
OBSERVER_KIND = "chaos.watch"
STEP_SEC = 0.05
BEAT_SEC = 0.25

OBSERVER_RUNS_DDL = """
CREATE TABLE IF NOT EXISTS chaos_observer_runs (
    id bigserial PRIMARY KEY,
    name text NOT NULL,
    epoch bigint NOT NULL,
    node text NOT NULL,
    started_at timestamptz NOT NULL,
    last_beat_at timestamptz NOT NULL,
    ended_at timestamptz,                  -- NULL: the process died (or could not write it)
    beats int NOT NULL DEFAULT 1,
    probe_ok boolean NOT NULL,
    probe_lost int NOT NULL DEFAULT 0,
    reprobe_failed int NOT NULL DEFAULT 0
);
"""
