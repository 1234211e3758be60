"""A worker whose database sessions are terminated at a high rate (issue 41): every kind of session it
holds (its queue's control connection with the lock_keys' advisory locks, the pool connections of
progress and ctx.transaction(), the listener), idle or in the middle of a statement, while it
claims, heartbeats and finishes.

The workers connect with an application_name of their own, and only their sessions are terminated.
What must hold: no job is lost, two runs of one lock_key never overlap (test_runs, recorded on
sessions of their own), and the worker never uses a connection it no
longer owns: asyncpg's "released back to the pool" (a statement on a pooled connection after its
release) and "another operation (2) is in progress" (two operations on one connection at once)
must never appear in its log, nor the owner's own errors for either (storage/owned_connection.py).
"""

from __future__ import annotations

import asyncio
import itertools
import time
from datetime import UTC, datetime
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import pytest

from tests.conftest import wait_until
from tests.support.engine import job_service

pytestmark = pytest.mark.process

WORKER_APP = "dl-test-killed-worker"
KEYS = 8
JOBS = 160
CHURN_SEC = 8.0
# What a worker must never log: each is a connection used by someone who no longer owns it.
# (asyncpg: "cannot call Connection.fetch(): connection has been released back to the pool", "cannot
# switch to state 12; another operation (2) is in progress"; storage/owned_connection.py's own.)
MISUSE = ("released back to the pool", "another operation", "used after its release",
          "still runs on the same connection")


def _named(dsn: str, application_name: str) -> str:
    parts = urlsplit(dsn)
    query = [*parse_qsl(parts.query), ("application_name", application_name)]
    return urlunsplit((*parts[:3], urlencode(query), parts.fragment))


async def _killer(db, stop: asyncio.Event, kills: list[int]) -> None:
    """Terminate one of the workers' sessions every ~30 ms: in turn one running a statement, one
    holding an advisory lock (a control connection), and any (idle ones included)."""
    which = itertools.cycle([
        "a.state = 'active'",
        "EXISTS (SELECT 1 FROM pg_locks l WHERE l.pid = a.pid AND l.locktype = 'advisory')",
        "true",
    ])
    while not stop.is_set():
        killed = await db.fetchval(
            f"SELECT count(pg_terminate_backend(pid)) FROM (SELECT a.pid FROM pg_stat_activity a "
            f"WHERE a.datname = current_database() AND a.application_name = $1 AND {next(which)} "
            f"ORDER BY random() LIMIT 1) s", WORKER_APP)
        kills[0] += killed
        await asyncio.sleep(0.03)


async def _all_done(db, total: int) -> bool:
    return await db.fetchval("SELECT count(*) FROM dl_jobs WHERE status = 'succeeded'") == total


async def test_a_worker_whose_sessions_are_killed_never_reuses_a_connection_nor_overlaps_a_key(dsn, db, workers):
    settings = {"db_dsn": _named(dsn, WORKER_APP), "heartbeat_sec": 0.2, "claim_backoff_sec": 0.5,
                "reaper_period_sec": 0.5, "poll_fallback_sec": 1}
    ws = [workers(queues={"default": 6}, **settings) for _ in range(2)]
    await asyncio.gather(*(w.wait_ready() for w in ws))
    jobs = job_service(db)

    stop, kills = asyncio.Event(), [0]
    killer = asyncio.create_task(_killer(db, stop, kills))
    started = time.monotonic()
    try:
        # The producer (on sessions of its own) enqueues through the churn.
        for n in range(0, JOBS, 20):
            await jobs.trigger_many([
                {"queue": "default", "task": "test.recorded_to_the_end", "lock_key": f"k{(n + i) % KEYS}",
                 "lease_ttl_sec": 5,
                 "args": {"dsn": dsn, "seconds": 0.05, "chunks": 2, "transaction": (n + i) % 3 == 0}}
                for i in range(20)])
            await asyncio.sleep(CHURN_SEC * 20 / JOBS)
        await asyncio.sleep(max(0.0, CHURN_SEC - (time.monotonic() - started)))
    finally:
        stop.set()
        await killer
    await wait_until(lambda: _all_done(db, JOBS), timeout=25, message="not every job succeeded after the churn")
    assert kills[0] > 50, f"only {kills[0]} sessions were terminated: the test proves nothing"

    runs = await db.fetch("SELECT lock_key, job_id, attempt, pid, started_at, ended_at FROM test_runs "
                          "ORDER BY lock_key, started_at")
    problems = []
    never = datetime.max.replace(tzinfo=UTC)
    for key, group in itertools.groupby(runs, key=lambda r: r["lock_key"]):
        last = None  # the run of the key that ended last so far (a run that never ended: never)
        for run in group:
            if run["ended_at"] is None:
                problems.append(f"a run of {key} never ended: {dict(run)}")
            if last is not None and run["started_at"] < (last["ended_at"] or never):
                problems.append(f"two runs of lock_key {key} overlapped: {dict(last)} and {dict(run)}")
            if last is None or (run["ended_at"] or never) > (last["ended_at"] or never):
                last = run
    for w in ws:
        log = w.log()
        # a killed control connection shows as either line, depending on whether the next step or the
        # replacement found it dead first
        if "database unreachable" not in log and "reconnected and retook lock_keys" not in log:
            problems.append(f"the kills never reached worker {w.pid}")
        problems += [f"worker {w.pid} used a connection it no longer owned: {line}"
                     for line in log.splitlines() if any(m in line for m in MISUSE)]
    assert not problems, f"{len(problems)} problems (logs: {[w.log_path for w in ws]}):\n" + "\n".join(problems[:20])
