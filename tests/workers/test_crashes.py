"""Crash, signal and restart behaviour with real worker processes."""

import asyncio
import itertools
import signal
import time

import pytest

from tests.conftest import wait_until
from tests.support.engine import enqueue, event_kinds, job_row
from tests.support.wire import CountingProxy


async def _status(db, job_id):
    return (await job_row(db, job_id))["status"]


async def _all_succeeded(db, ids):
    rows = await db.fetch("SELECT status FROM dl_jobs WHERE job_id = ANY($1)", ids)
    return all(r["status"] == "succeeded" for r in rows)


async def test_two_worker_processes_never_overlap_on_one_lock_key(dsn, db, workers):
    a = workers(queues={"default": 3})
    b = workers(queues={"default": 3})
    await asyncio.gather(a.wait_ready(), b.wait_ready())
    ids = [await enqueue(db, "test.recorded_sleep", lock_key="one-key",
                         args={"dsn": dsn, "seconds": 0.3, "chunks": 3}) for _ in range(6)]
    await wait_until(lambda: _all_succeeded(db, ids), timeout=30)
    runs = await db.fetch("SELECT pid, started_at, ended_at FROM test_runs ORDER BY started_at")
    assert len(runs) == 6
    for prev, nxt in itertools.pairwise(runs):
        assert nxt["started_at"] >= prev["ended_at"], "two jobs with one lock_key overlapped"
    # (how fast the key is handed over is measured in bench/, not asserted here)


async def test_kill_9_mid_job_another_process_completes_it(dsn, db, workers):
    victim = workers(queues={"default": 1}, heartbeat_sec=0.3)
    await victim.wait_ready()
    job_id = await enqueue(db, "test.recorded_sleep", lease_ttl_sec=2,
                           args={"dsn": dsn, "seconds": 1.0, "chunks": 10})
    await wait_until(lambda: db.fetchval("SELECT count(*) FROM test_runs"), timeout=10)
    victim.signal(signal.SIGKILL)
    assert await victim.wait_exit() == -signal.SIGKILL
    assert await _status(db, job_id) == "running"  # nobody told the queue
    rescuer = workers(queues={"default": 1}, heartbeat_sec=0.3, reaper_period_sec=0.3)
    await rescuer.wait_ready()
    await wait_until(lambda: _all_succeeded(db, [job_id]), timeout=20)
    row = await job_row(db, job_id)
    assert row["attempt"] == 2
    runs = await db.fetch("SELECT attempt, pid, ended_at FROM test_runs WHERE job_id=$1 ORDER BY id", job_id)
    assert [(r["attempt"], r["pid"]) for r in runs] == [(1, victim.pid), (2, rescuer.pid)]
    assert runs[0]["ended_at"] is None and runs[1]["ended_at"] is not None
    kinds = [k for k in await event_kinds(db, job_id) if k != "heartbeat"]
    assert kinds == ["queued", "picked", "requeue", "picked", "done"]


async def test_sigterm_puts_the_running_job_back_without_burning_an_attempt(db, workers):
    w = workers(queues={"default": 1}, shutdown_timeout_sec=5)
    await w.wait_ready()
    job_id = await enqueue(db, "dl.sleep", args={"seconds": 60, "chunks": 600})
    await wait_until(lambda: _progress(db, job_id), timeout=10)
    w.signal(signal.SIGTERM)
    assert await w.wait_exit(timeout=10) == 0
    row = await job_row(db, job_id)
    assert (row["status"], row["attempt"], row["started_at"]) == ("queued", 0, None)
    last = await db.fetchrow("SELECT kind, payload FROM dl_job_events WHERE job_id=$1 ORDER BY event_id DESC "
                             "LIMIT 1", job_id)
    assert last["kind"] == "requeue" and last["payload"]["reason"] == "shutdown"
    # the lock was released with it: the next worker takes the job at once
    w2 = workers(queues={"default": 1})
    await w2.wait_ready()
    await wait_until(lambda: _status_is(db, job_id, "running"), timeout=5)
    assert (await job_row(db, job_id))["attempt"] == 1


async def _progress(db, job_id):
    return (await job_row(db, job_id))["progress"].get("chunks_done")


async def _status_is(db, job_id, status):
    return await _status(db, job_id) == status


async def test_sigterm_with_a_stuck_sync_pipeline_still_exits_and_hands_the_job_back(db, workers):
    w = workers(queues={"default": 1}, shutdown_timeout_sec=0.5)
    await w.wait_ready()
    job_id = await enqueue(db, "test.sync_stuck", args={"seconds": 120})
    await wait_until(lambda: _status_is(db, job_id, "running"), timeout=10)
    # shutdown timeout 0.5 s + the forced-stop grace (5 s): exiting within 60 s shows the process
    # did not wait for the thread, which sleeps 120 s
    w.signal(signal.SIGTERM)
    assert await w.wait_exit(timeout=60) == 0
    row = await job_row(db, job_id)
    assert row["status"] == "queued" and row["attempt"] == 0


async def _journal_of_burned_attempts(db, ids) -> list:
    """Journal rows that only exist when an attempt was used up: a retry or a failure."""
    rows = await db.fetch("SELECT job_id, kind, payload FROM dl_job_events WHERE job_id = ANY($1) AND "
                          "(kind = 'failed' OR (kind = 'requeue' AND payload->>'reason' = 'retry')) "
                          "ORDER BY event_id", ids)
    return [(str(r["job_id"]), r["kind"], r["payload"]) for r in rows]


async def _burned_attempts(db, ids) -> list[str]:
    """What shows that the restart used up an attempt: a job not `succeeded` on attempt 1, a
    `requeue` for a retry or a `failed` in the journal."""
    rows = await db.fetch("SELECT job_id, status, attempt, error FROM dl_jobs WHERE job_id = ANY($1)", ids)
    assert len(rows) == len(ids)
    bad = [(str(r["job_id"]), r["status"], r["attempt"], r["error"]) for r in rows
           if (r["status"], r["attempt"]) != ("succeeded", 1)]
    burned = await _journal_of_burned_attempts(db, ids)
    return ([f"jobs not succeeded on their first attempt: {bad}"] if bad else []) + \
        ([f"attempts used up (journal): {burned}"] if burned else [])


async def _assert_no_attempt_burned(db, ids, how: str) -> None:
    problems = await _burned_attempts(db, ids)
    assert not problems, f"PostgreSQL {how}: " + "; ".join(problems)


@pytest.mark.exclusive(when="shared_server")  # restarts PostgreSQL: alone when the workers share one
async def test_postgres_restart_mid_run_workers_recover_and_no_attempt_is_used(dsn, db, restart, workers):
    w = workers(queues={"default": 4}, heartbeat_sec=0.2)
    await w.wait_ready()
    ids = [await enqueue(db, "dl.sleep", args={"seconds": 1.5, "chunks": 15}) for _ in range(12)]
    await wait_until(lambda: db.fetchval("SELECT count(*) = 4 FROM dl_jobs WHERE status='running'"), timeout=10)
    how = await restart()
    await db.expire_connections()
    await wait_until(lambda: _all_ended_safe(db, ids), timeout=90,
                     message=f"all jobs to end after PostgreSQL was {how}")
    assert w.proc.poll() is None, f"PostgreSQL {how}: the worker must survive the restart"
    # the worker noticed and recovered (not just lucky timing)
    assert "reconnect" in w.log() or "unreachable" in w.log(), f"PostgreSQL {how}: no reconnect logged"
    await _assert_no_attempt_burned(db, ids, how)


@pytest.mark.exclusive(when="shared_server")  # restarts PostgreSQL: alone when the workers share one
async def test_postgres_restart_during_progress_on_the_last_attempt_fails_nothing_and_api_never_500s(
        dsn, db, restart, workers):
    """Pipelines on their LAST attempt (max_attempts=1) write progress every 10 ms while PostgreSQL
    restarts, and API calls keep coming in: no attempt may fail (the job would end `failed`), and
    the API answers 503 while the database is away, never 500."""
    from dataloader.api import create_app
    from dataloader.app import App
    from tests.api.v1.conftest import api_settings, client_for
    from tests.api.v1.constants import OTHER_QUEUE, TRIGGER, job_body

    w = workers(queues={"default": 8}, heartbeat_sec=0.2)
    await w.wait_ready()
    ids = [await enqueue(db, "dl.sleep", max_attempts=1, args={"seconds": 5, "chunks": 500}) for _ in range(8)]
    await wait_until(lambda: db.fetchval("SELECT count(*) = 8 FROM dl_jobs WHERE status='running' "
                                         "AND progress ? 'chunks_done'"), timeout=10)
    ctx = await App(api_settings(dsn)).open()
    answers: list[tuple[str, int, str]] = []
    restarting = asyncio.Event()
    try:
        async with client_for(create_app(ctx.settings, context=ctx)) as client:
            async def call_api() -> None:
                deadline = None
                while True:
                    codes = []
                    for method, path, body in (
                            ("POST", TRIGGER, job_body(queue=OTHER_QUEUE, lock_key=f"restart-{len(answers)}")),
                            ("GET", f"/api/v1/jobs/{ids[0]}/status", None),
                            ("GET", "/api/v1/jobs?limit=5", None),
                            ("GET", "/status", None)):
                        response = await client.request(method, path, json=body)
                        answers.append((f"{method} {path}", response.status_code, response.text[:300]))
                        codes.append(response.status_code)
                    if restarting.is_set():
                        # after the restart: until a whole round succeeds again (bounded)
                        deadline = deadline or asyncio.get_running_loop().time() + 30
                        if all(c in (200, 201) for c in codes) or asyncio.get_running_loop().time() > deadline:
                            return
                    await asyncio.sleep(0.02)  # pacing, not synchronisation

            caller = asyncio.create_task(call_api())
            try:
                how = await restart()
            finally:
                restarting.set()
            await asyncio.wait_for(caller, timeout=60)
    finally:
        await ctx.close()
    await db.expire_connections()
    await wait_until(lambda: _all_ended_safe(db, ids), timeout=90,
                     message=f"all jobs to end after PostgreSQL was {how}")
    problems = await _burned_attempts(db, ids)
    errors = [a for a in answers if a[1] not in (200, 201, 503)]
    if errors:
        problems.append(f"{len(errors)} of {len(answers)} API answers were not 200/201/503: {errors[:4]}")
    if not answers or not all(a[1] in (200, 201) for a in answers[-4:]):
        problems.append(f"the API did not recover: {answers[-4:]}")
    assert not problems, f"PostgreSQL {how}: " + "; ".join(problems)
    assert w.proc.poll() is None, f"PostgreSQL {how}: the worker must survive the restart"


async def _all_ended_safe(db, ids):
    try:
        rows = await db.fetch("SELECT status FROM dl_jobs WHERE job_id = ANY($1)", ids)
    except (OSError, ConnectionError):  # the test's own pool also sees the restart
        return False
    except Exception as exc:
        import asyncpg

        if isinstance(exc, asyncpg.PostgresError | asyncpg.InterfaceError):
            return False
        raise
    return all(r["status"] in ("succeeded", "failed", "canceled", "lost") for r in rows)


async def test_idle_worker_sends_next_to_no_queries(dsn, db, workers):
    """Every statement the worker sends passes a counting proxy (tests/support/wire.py): a Query or
    an Execute message on the wire, none missed between samples, on the embedded server and an
    external one alike. Once start-up is over (0.5 s with nothing sent, or 5 s), an idle worker with two
    queues sends at most 1 statement per second on average over a 6 s window."""
    port = int(await db.fetchval("SHOW port"))
    async with CountingProxy(dsn, port) as proxy:
        w = workers(queues={"default": 4, "other": 2}, poll_fallback_sec=10, reaper_period_sec=10,
                    db_dsn=proxy.dsn)
        await w.wait_ready()
        await _settle(proxy, quiet=0.5, at_most=5.0)
        assert len(proxy.statements) > 5, "the worker's start-up did not go through the proxy"
        window = 6.0
        start = time.monotonic()
        await asyncio.sleep(window)  # the measured window: a rate over time, not a wait for a state
        sent = [kind for at, kind in proxy.statements if at >= start]
    assert len(sent) / window <= 1.0, f"idle worker sent {len(sent)} statements in {window}s: {sent}"


async def _settle(proxy: CountingProxy, *, quiet: float, at_most: float) -> None:
    """Until the worker has sent nothing for `quiet` s (its start-up is over), or `at_most` s: a
    worker that never goes quiet is measured anyway, and fails on its rate."""
    try:
        await wait_until(lambda: time.monotonic() - proxy.statements[-1][0] >= quiet, timeout=at_most)
    except AssertionError:
        pass
