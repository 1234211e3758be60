"""A database restart is weather, not an error (promise 10), for every capability at once: one node
(App.running: workers, scheduler, process steps and timers, observers, the operations runner and
the leader's duties) works while PostgreSQL restarts under it, and the HTTP API is polled all along.
Afterwards: no process in error and no lost call, no observer failure or move, no schedule tick
missed or doubled, the bulk operation's counts exact, every plain job succeeded on its first
attempt, the leader's duties ran again, no maintenance service crashed, and no route answered 500.

With DL_TEST_DSN set and no DL_TEST_RESTART_CMD the server is not ours to restart: the test then
terminates the test database's sessions instead and says so (a warning and the `pg_restart`
property), as tests/workers/test_crashes.py does."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta

import asyncpg
import httpx
import pytest

from dataloader import App, Queue, Settings
from dataloader.api import create_app
from dataloader.observers import ObserverContext, observer
from tests.api.v1.conftest import client_for
from tests.conftest import wait_until
from tests.support.engine import enqueue

TABLES = ("dl_schedules, dl_schedule_runs, dl_observers, dl_nodes, dl_operations, dl_operation_events, "
          "dl_process_feed, dl_process_events, dl_process_tasks, dl_processes, dl_workflow_signals, "
          "dl_workflow_tokens, dl_workflow_steps, dl_workflow_runs, dl_chain_join_members, dl_chain_joins, "
          "dl_jobs, dl_job_events")
BULK_JOBS = 1200
BULK_BATCH = 50
CALLERS = ("caller-a", "caller-b")  # two processes called back to back: a step is in flight at the restart


@observer("test.restart_counter")
async def restart_counter(ctx: ObserverContext) -> None:
    """Counts in its checkpoint, through dataloader's fenced writes only (no connection of its own),
    so any failure it meets is the engine's."""
    count = (ctx.checkpoint or {}).get("count", 0)
    while not await ctx.sleep(0.1):
        count += 1
        await ctx.save({"count": count})


def node_settings(dsn: str) -> Settings:
    return Settings(
        db_dsn=dsn, workers=[Queue("rs-jobs", 4)], node_name="restart-node", heartbeat_sec=0.2,
        poll_fallback_sec=1, default_lease_ttl_sec=30, claim_backoff_sec=0.2, reaper_period_sec=0.5,
        observer_capacity=2, node_heartbeat_sec=0.2, node_dead_after_sec=30, observer_stop_grace_sec=0.5,
        observer_restart_backoff_sec=0.2, observer_restart_backoff_max_sec=1.0,
        retention_enabled=True, retention_period_sec=0.5, stats_enabled=True, stats_period_sec=0.5,
        leader_retry_sec=0.2, operations_period_sec=1, operations_batch_pause_sec=0.05,
        pipeline_modules="tests.support.pipelines", api_token=None)


@pytest.fixture
async def clean(pool: asyncpg.Pool) -> AsyncIterator[asyncpg.Pool]:
    await pool.execute(f"TRUNCATE {TABLES}")
    yield pool
    await pool.execute(f"TRUNCATE {TABLES}")


ROUTES = ["/status", "/metrics", "/api/v1/jobs?limit=5", "/api/v1/schedules", "/api/v1/schedules/every-second",
          "/api/v1/schedules/every-second/history", "/api/v1/observers", "/api/v1/observers/counter",
          "/api/v1/nodes", "/api/v1/operations"]


async def _poll(http: httpx.AsyncClient, routes: list[str], answers: list[tuple[str, int, str]],
                stop: asyncio.Event) -> None:
    while not stop.is_set():
        for route in routes:
            response = await http.get(route)
            answers.append((route, response.status_code, response.text[:300]))
        await asyncio.sleep(0.05)  # pacing, not synchronisation


async def _call_forever(app: App, ns: str, pid: str, calls: list[tuple[int, str]], stop: asyncio.Event) -> None:
    """Calls to one process, one after another; each call's outcome is written down (n, outcome)."""
    n = 0
    while not stop.is_set():
        n += 1
        try:
            response = await app.processes.call(ns, pid, {"n": n}, idempotency_key=f"{pid}-{n}", timeout=30)
            calls.append((n, "ok" if response["n"] == n else f"wrong {response}"))
        except Exception as exc:  # the database away: the same call (same key) is repeated
            calls.append((n, f"{type(exc).__name__}: {exc}"[:200]))
            n -= 1
            await asyncio.sleep(0.1)


@pytest.mark.timeout(240)
@pytest.mark.exclusive(when="shared_server")  # restarts PostgreSQL: alone when the workers share one
async def test_every_capability_rides_through_a_postgres_restart(clean, dsn, ns, restart):
    from tests.processes.processors import register

    db = clean
    register(ns)
    async with App(node_settings(dsn)) as app:
        async with app.running() as manager, client_for(create_app(app.settings, context=app)) as http:
            # -- set everything going -------------------------------------------------------------
            await app.schedules.create(app.schedules.spec(name="every-second", task="dl.noop", queue="rs-jobs",
                                                          every_sec=1, missed="catch_up",
                                                          # every tick of the outage is owed: the default
                                                          # limit of 10 skips ticks when a loaded machine
                                                          # takes over 10 s to restart PostgreSQL
                                                          catch_up_limit=1000))
            await app.observers.create(app.observers.spec(name="counter", kind="test.restart_counter"))
            for pid in CALLERS:
                await app.processes.init(ns, pid, {"n": 0})
            await app.processes.init(ns, "timed", {"n": 0})
            bulk = [await enqueue(db, "dl.noop", queue="rs-bulk") for _ in range(BULK_JOBS)]
            plain = [await enqueue(db, "dl.sleep", queue="rs-jobs", args={"seconds": 1.5, "chunks": 15})
                     for _ in range(8)]
            await wait_until(lambda: db.fetchval("SELECT (checkpoint->>'count')::int > 5 FROM dl_observers "
                                                 "WHERE name = 'counter'"), timeout=20, message="the observer to run")
            await wait_until(lambda: db.fetchval("SELECT count(*) >= 2 FROM dl_schedule_runs"), timeout=20,
                             message="the schedule to tick")
            await wait_until(lambda: manager.is_leader, timeout=20, message="the node to lead")
            op = await app.operations.start("set_priority", {"queues": ["rs-bulk"]}, params={"priority": 7},
                                            batch_size=BULK_BATCH, started_by="test")
            await wait_until(lambda: db.fetchval("SELECT done > 0 FROM dl_operations WHERE operation_id = $1",
                                                 op.id), timeout=20, message="the operation's first batch")
            await wait_until(lambda: db.fetchval("SELECT count(*) >= 2 FROM dl_jobs WHERE status = 'running' AND "
                                                 "queue = 'rs-jobs' AND task = 'dl.sleep'"), timeout=20,
                             message="plain jobs to run")
            # a process timer armed just before the restart, due around it (it must fire once)
            await app.processes.call(ns, "timed", {"n": 1, "timer": 1.0})
            stop = asyncio.Event()
            answers: list[tuple[str, int, str]] = []
            calls: dict[str, list[tuple[int, str]]] = {pid: [] for pid in CALLERS}
            routes = [*ROUTES, f"/api/v1/operations/{op.id}", f"/api/v1/processes/{ns}",
                      *(f"/api/v1/processes/{ns}/{pid}" for pid in CALLERS)]
            background = [asyncio.create_task(_poll(http, routes, answers, stop)),
                          *(asyncio.create_task(_call_forever(app, ns, pid, calls[pid], stop)) for pid in CALLERS)]

            def answered() -> int:
                return min(len([c for c in each if c[1] == "ok"]) for each in calls.values())

            try:
                await wait_until(lambda: answered() >= 3, timeout=20, message="calls to go through before the restart")
                assert await db.fetchval("SELECT state = 'running' FROM dl_operations WHERE operation_id = $1",
                                         op.id), "the operation must still be mid-way at the restart"
                restarted_at = datetime.now(UTC)
                how = await restart()
                await db.expire_connections()
                ok_before = answered()
                await wait_until(lambda: answered() >= ok_before + 3, timeout=60,
                                 message=f"calls to each process to go through after PostgreSQL was {how}")
                done = await app.operations.wait(op.id, timeout=90)
                await wait_until(lambda: db.fetchval("SELECT count(*) = 0 FROM dl_jobs WHERE job_id = ANY($1) AND "
                                                     "status <> 'succeeded'", plain), timeout=60,
                                 message="the plain jobs to end")
                await wait_until(lambda: db.fetchval("SELECT count(*) >= 1 FROM dl_process_events WHERE ns = $1 "
                                                     "AND process_id = 'timed' AND payload->>'kind' = 'timeout'", ns),
                                 timeout=30, message="the process timer to fire")
                # the scheduler ticks on: three ticks after the restart
                await wait_until(lambda: db.fetchval("SELECT count(*) >= 3 FROM dl_schedule_runs WHERE tick_at > $1",
                                                     restarted_at), timeout=30, message="ticks after the restart")
                # the leader leads again and its duties ran after the restart
                await wait_until(lambda: manager.is_leader and all(
                    s.last_tick_at is not None and s.last_tick_at > restarted_at
                    for s in manager.services_status() if s.name in ("pruner", "stats_rollup")),
                    timeout=30, message="the leader's duties to run again")
                counter_before = await db.fetchval("SELECT (checkpoint->>'count')::int FROM dl_observers "
                                                   "WHERE name = 'counter'")
                await wait_until(lambda: db.fetchval("SELECT (checkpoint->>'count')::int > $1 FROM dl_observers "
                                                     "WHERE name = 'counter'", counter_before + 3), timeout=20,
                                 message="the observer to count on")
                # read while the node runs (its stop hands the observer back, a move)
                counter = await db.fetchrow("SELECT state, epoch, failures, moves, last_error FROM dl_observers "
                                            "WHERE name = 'counter'")
            finally:
                stop.set()
                await asyncio.gather(*background, return_exceptions=True)
            await asyncio.gather(*(http.get(r) for r in routes))  # one more round, all after the restart
            services = {s.name: s for s in manager.services_status()}

    context = f"PostgreSQL was {how}"
    # HTTP: 503 while the database is away, never a 500
    codes = {code for _, code, _ in answers}
    assert not [a for a in answers if a[1] >= 500 and a[1] != 503], (context, [a for a in answers if a[1] >= 500])
    assert codes <= {200, 503}, (context, codes)
    # processes: every call answered once, in order, none lost; nothing in error
    for pid, each in calls.items():
        ok = [n for n, outcome in each if outcome == "ok"]
        assert ok == list(range(1, len(ok) + 1)), (context, pid, each)
        call_events = await db.fetchval("SELECT count(*) FROM dl_process_events WHERE ns = $1 AND process_id = $2 "
                                        "AND payload->>'kind' = 'call'", ns, pid)
        assert call_events == len(ok), (context, pid, call_events, len(ok))
    statuses = dict(await db.fetch("SELECT id, status FROM dl_processes WHERE ns = $1", ns))
    assert statuses == {**dict.fromkeys(CALLERS, "running"), "timed": "running"}, (context, statuses)
    assert await db.fetchval("SELECT count(*) FROM dl_process_tasks WHERE ns = $1 AND status = 'error'", ns) == 0
    assert await db.fetchval("SELECT count(*) FROM dl_process_events WHERE ns = $1 AND process_id = 'timed' AND "
                             "payload->>'kind' = 'timeout'", ns) == 1
    # observers: the same run (no crash, no move) counted on
    assert tuple(counter) == ("processing", 1, 0, 0, None), (context, dict(counter))
    # schedules: one job per tick, every tick from the first to the last, none skipped
    runs = await db.fetch("SELECT tick_at, skipped_before FROM dl_schedule_runs ORDER BY tick_at")
    ticks = [r["tick_at"] for r in runs]
    assert ticks == [ticks[0] + timedelta(seconds=i) for i in range(len(ticks))], (context, ticks)
    assert all(r["skipped_before"] == 0 for r in runs), (context, [tuple(r) for r in runs])
    assert await db.fetchval("SELECT count(*) FROM dl_jobs WHERE idempotency_key LIKE 'schedule:every-second:%'") \
        == len(ticks)
    # the bulk operation: every job exactly once
    assert (done.state, done.total, done.done, done.changed) == ("finished", BULK_JOBS, BULK_JOBS, BULK_JOBS), \
        (context, done)
    assert await db.fetchval("SELECT count(*) FROM dl_jobs WHERE job_id = ANY($1) AND priority = 7", bulk) == BULK_JOBS
    # no attempt of any job (plain, schedule, process step or timer) was used up by the restart: a
    # process step cut off by it once went back with a retry (attempt 2, after a 30 s backoff)
    burned = await db.fetch("SELECT job_id, kind, payload FROM dl_job_events WHERE kind = 'failed' OR "
                            "(kind = 'requeue' AND payload->>'reason' = 'retry')")
    assert not burned, (context, [tuple(r) for r in burned])
    # plain jobs: all succeeded on their first attempt
    rows = await db.fetch("SELECT status, attempt FROM dl_jobs WHERE job_id = ANY($1)", plain)
    assert [tuple(r) for r in rows] == [("succeeded", 1)] * len(plain), (context, [tuple(r) for r in rows])
    # no maintenance service crashed (a crash restarts it and counts)
    assert not {name: s.restarts for name, s in services.items() if s.restarts}, (context, services)
