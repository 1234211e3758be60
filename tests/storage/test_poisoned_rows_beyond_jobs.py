"""No single row breaks a node (promise 9), beyond dl_jobs: rows of dl_schedules, dl_processes,
dl_process_tasks, dl_observers, dl_operations and dl_nodes holding any value their columns allow
(+-infinity, 294276 AD, 4713 BC, a huge jsonb, NULL where allowed), written by SQL as another
producer or an operator would. A node running beside them (workers, scheduler, process timers,
observers, the operations runner) keeps readiness, metrics and every list/get route answering,
keeps its other rows flowing, and gives each odd row a clear outcome."""

from __future__ import annotations

import logging
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta

import asyncpg
import httpx
import pytest

import tests.support.observers  # noqa: F401  (registers test.* observer kinds)
from dataloader import App, Queue, Settings
from dataloader.api import create_app
from dataloader.exceptions import ProcessTaskFailed
from dataloader.model.schedule_timing import Timing, next_tick, next_ticks, plan
from dataloader.storage.db import parse_timestamptz_text
from tests.api.v1.conftest import client_for
from tests.conftest import wait_until
from tests.support.engine import enqueue
from tests.support.observers import EVENTS_DDL

EXTREMES = ["'-infinity'", "'infinity'", "'294276-12-31 23:59:59+00'", "'4713-01-01 00:00:00+00 BC'"]
HUGE = "(SELECT jsonb_object_agg('k' || i, repeat('x', 1000)) FROM generate_series(1, 5000) i)"  # ~5 MB
TABLES = ("dl_schedules, dl_schedule_runs, dl_observers, dl_nodes, dl_operations, dl_operation_events, "
          "dl_process_feed, dl_process_events, dl_process_tasks, dl_processes, dl_workflow_signals, "
          "dl_workflow_tokens, dl_workflow_steps, dl_workflow_runs, dl_chain_join_members, dl_chain_joins, "
          "dl_jobs, dl_job_events")


def node_settings(dsn: str, **overrides: object) -> Settings:
    values: dict[str, object] = {
        "db_dsn": dsn, "workers": [Queue("odd-q", 2)], "node_name": "odd-node", "heartbeat_sec": 0.2,
        "poll_fallback_sec": 1, "default_lease_ttl_sec": 5, "observer_capacity": 4,
        "node_heartbeat_sec": 0.2, "node_dead_after_sec": 10.0, "observer_stop_grace_sec": 0.5,
        "observer_restart_backoff_sec": 0.2, "observer_restart_backoff_max_sec": 1.0,
        "retention_enabled": False, "stats_enabled": False, "pipeline_modules": "tests.support.pipelines",
        "api_token": None}
    values.update(overrides)
    return Settings(**values)  # type: ignore[arg-type]


@pytest.fixture
async def clean(pool: asyncpg.Pool) -> AsyncIterator[asyncpg.Pool]:
    await pool.execute(EVENTS_DDL)
    await pool.execute(f"TRUNCATE {TABLES}, test_observer_events")
    yield pool
    await pool.execute(f"TRUNCATE {TABLES}, test_observer_events")


async def _get_ok(http: httpx.AsyncClient, path: str, **params: object) -> httpx.Response:
    response = await http.get(path, params=params or None)
    assert response.status_code == 200, (path, response.status_code, response.text[:500])
    return response


async def _readiness_and_metrics(http: httpx.AsyncClient) -> None:
    await _get_ok(http, "/status")
    metrics = await _get_ok(http, "/metrics")
    assert "dl_queue_stats_up 1.0" in metrics.text
    assert "dl_schedule_ticks_total" in metrics.text


def _snapshot(timer_at: str) -> dict[str, object]:
    """A process's saved state (dl_process_tasks.state_before) holding an armed timer due `timer_at`."""
    return {"status": "running", "detail": None, "corrupted_by": None, "aux_state": {}, "aux_state_bytes": None,
            "metadata": {}, "last_event_id": 0, "timer_type": "timeout", "timer_at": timer_at, "timer_armed": True}


async def _insert_odd_schedules(db: asyncpg.Pool) -> None:
    for i, extreme in enumerate(EXTREMES):
        for timing, value in (("cron", "'*/5 * * * *'"), ("every_ms", "1000")):
            await db.execute(f"INSERT INTO dl_schedules (name, task, queue, {timing}, next_run_at, last_run_at) "
                             f"VALUES ('odd-{timing}-{i}', 'dl.noop', 'odd-q', {value}, {extreme}, {extreme})")
    # a timing the API never stores (every > 366 days), already due
    await db.execute("INSERT INTO dl_schedules (name, task, queue, every_ms, next_run_at, catch_up_limit, missed) "
                     "VALUES ('odd-bad-every', 'dl.noop', 'odd-q', 9223372036854775807, now() - interval '1 minute', "
                     "2147483647, 'catch_up')")
    await db.execute(f"INSERT INTO dl_schedules (name, task, queue, every_ms, next_run_at, args) VALUES "
                     f"('odd-huge', 'dl.noop', 'odd-q', 3600000, now(), {HUGE})")


async def _insert_odd_observers_and_nodes(db: asyncpg.Pool, dsn: str) -> None:
    for i, extreme in enumerate(EXTREMES):
        # restart_at 'infinity' for both future extremes: the soonest waiting one (what every node's
        # heartbeat computes) is then 'infinity' once the past ones are claimed
        restart_at = "'infinity'" if i == 2 else extreme
        await db.execute(f"INSERT INTO dl_observers (name, kind, args, restart_at, checkpoint, last_error_at, "
                         f"created_at, started_at, stopped_at) VALUES ('odd-obs-{i}', 'test.probe', $1::jsonb, "
                         f"{restart_at}, NULL, {extreme}, {extreme}, {extreme}, {extreme})",
                         {"dsn": dsn, "tick_sec": 0.2})
        await db.execute(f"INSERT INTO dl_nodes (node_id, name, host, pid, version, heartbeat_at, started_at) "
                         f"VALUES ($1, 'odd-node-{i}', 'h', 1, 'v', {extreme}, {extreme})", uuid.uuid4())
    await db.execute(f"INSERT INTO dl_observers (name, kind, args, checkpoint, status) VALUES ('odd-obs-huge', "
                     f"'test.probe', $1::jsonb || {HUGE}, {HUGE}, {HUGE})", {"dsn": dsn, "tick_sec": 0.2, "save": True})


async def _insert_odd_operations(db: asyncpg.Pool) -> dict[str, uuid.UUID]:
    ids = {}
    for i, extreme in enumerate(EXTREMES):
        # the cursor, snapshot and creation time at the extreme; the lease over for the two past
        # extremes, and held until 'infinity' for the two future ones (nobody takes them, and the
        # soonest lease end a runner computes is then 'infinity')
        lease = "'-infinity'" if i in (0, 3) else "'infinity'"
        ids[f"odd-op-{i}"] = op_id = uuid.uuid4()
        await db.execute(f"INSERT INTO dl_operations (operation_id, kind, filter, started_by, cursor_created_at, "
                         f"cursor_job_id, snapshot_at, lease_expires_at, lease_owner, created_at, params) VALUES "
                         f"($1, 'cancel', '{{\"queues\": [\"odd-ops-{i}\"]}}', 'sql', {extreme}, $1, {extreme}, "
                         f"{lease}, 'someone', {extreme}, {HUGE})", op_id)
    return ids


async def _insert_odd_processes(db: asyncpg.Pool, ns: str) -> None:
    for i, extreme in enumerate(EXTREMES):
        await db.execute(f"INSERT INTO dl_processes (ns, id, status, aux_state, timer_type, timer_at, last_event_id, "
                         f"status_changed_at, created_at, updated_at) VALUES ($1, 'odd-p{i}', 'running', NULL, "
                         f"'timeout', {extreme}, 1, {extreme}, {extreme}, {extreme})", ns)
        # its history: an event at the extreme, the task that wrote it finished at the extreme
        task_id = uuid.uuid4()
        await db.execute(f"INSERT INTO dl_process_events (ns, process_id, event_id, task_id, ts, payload, metadata) "
                         f"VALUES ($1, 'odd-p{i}', 1, $2, {extreme}, {HUGE if i == 0 else 'NULL'}, NULL)", ns, task_id)
        await db.execute(f"INSERT INTO dl_process_tasks (task_id, ns, process_id, task_type, history_range, "
                         f"scheduled_at, created_at, finished_at, status, state_before) VALUES ($2, $1, 'odd-p{i}', "
                         f"'init', '{{\"limit\": 99999999999999}}', {extreme}, {extreme}, {extreme}, 'finished', "
                         f"$3::jsonb || jsonb_build_object('timer_at', {extreme}::timestamptz))",
                         ns, task_id, _snapshot("replaced"))
    await db.execute(f"INSERT INTO dl_processes (ns, id, status, aux_state, metadata) VALUES ($1, 'odd-huge', "
                     f"'running', {HUGE}, {HUGE})", ns)


async def _all_routes_answer(http: httpx.AsyncClient, db: asyncpg.Pool, ns: str) -> None:
    await _readiness_and_metrics(http)
    for path in ("/api/v1/schedules", "/api/v1/observers", "/api/v1/nodes", "/api/v1/operations",
                 f"/api/v1/processes/{ns}", f"/api/v1/processes/{ns}/events"):
        await _get_ok(http, path)
    await _get_ok(http, "/api/v1/nodes", include_ended="true")
    for (name,) in await db.fetch("SELECT name FROM dl_schedules"):
        await _get_ok(http, f"/api/v1/schedules/{name}")
        await _get_ok(http, f"/api/v1/schedules/{name}/history")
    for (name,) in await db.fetch("SELECT name FROM dl_observers"):
        await _get_ok(http, f"/api/v1/observers/{name}")
    for (op_id,) in await db.fetch("SELECT operation_id FROM dl_operations"):
        await _get_ok(http, f"/api/v1/operations/{op_id}")
        await _get_ok(http, f"/api/v1/operations/{op_id}/events")
    for (pid,) in await db.fetch("SELECT id FROM dl_processes"):
        await _get_ok(http, f"/api/v1/processes/{ns}/{pid}")
        await _get_ok(http, f"/api/v1/processes/{ns}/{pid}/trace")




async def test_a_node_keeps_every_capability_working_beside_odd_rows_of_every_table(clean, dsn, ns, caplog):
    """Odd rows in every table at once, one node running every duty beside them (what a node
    started on such a database meets). Each table's odd rows get a clear outcome and the normal
    rows flow; readiness, metrics and every list/get route answer 200 throughout."""
    from tests.processes.processors import register

    db = clean
    caplog.set_level(logging.INFO, logger="dataloader")
    register(ns)
    await _insert_odd_schedules(db)
    await _insert_odd_observers_and_nodes(db, dsn)
    odd_ops = await _insert_odd_operations(db)
    await _insert_odd_processes(db, ns)
    queued = [await enqueue(db, "dl.noop", queue="odd-ops-n") for _ in range(3)]

    async with App(node_settings(dsn)) as app:
        async with app.running(), client_for(create_app(app.settings, context=app)) as http:
            await _all_routes_answer(http, db, ns)
            # -- schedules: a normal one keeps ticking ----------------------------------------------
            await app.schedules.create(app.schedules.spec(name="normal", task="dl.noop", queue="odd-q", every_sec=1))
            # -- observers: a normal one is claimed and runs -------------------------------------
            await app.observers.create(app.observers.spec(name="normal-obs", kind="test.probe",
                                                          args={"dsn": dsn, "tick_sec": 0.2}))
            # -- operations: a normal one does exactly its jobs -----------------------------------
            op = await app.operations.start("cancel", {"queues": ["odd-ops-n"]}, started_by="test")
            # -- processes: calls, a timer and a restart, beside and on the odd rows ---------------
            await app.processes.init(ns, "normal-p", {"n": 1})
            await app.processes.call(ns, "normal-p", {"n": 2, "timer": 0.3})
            for i in range(len(EXTREMES)):  # a call loads the history with the extreme event time
                response = await app.processes.call(ns, f"odd-p{i}", {"n": 10 + i}, timeout=20)
                assert response["history"] == 1 and response["first"] == 1, response
            # a 5 MB aux_state loads; the test processor hands it back as the new state, which is
            # past DL_MAX_ARGS_BYTES: the call fails with that reason (a clear outcome), nothing else
            with pytest.raises(ProcessTaskFailed, match=r"aux_state cannot be stored: it is \d+ bytes of JSON"):
                await app.processes.call(ns, "odd-huge", {"n": 1}, timeout=20)
            # ... and leaves the process in error, which a repair with a smaller state ends
            assert await db.fetchval("SELECT status FROM dl_processes WHERE ns = $1 AND id = 'odd-huge'", ns) == "error"
            response = await app.processes.repair(ns, "odd-huge", {"n": 2, "aux": {"small": True}}, timeout=20)
            assert response["kind"] == "repair"
            # a restart to a saved state whose timer is due at infinity: armed at the far end
            await app.processes.restart(ns, "odd-p1", "start")

            await wait_until(lambda: db.fetchval("SELECT count(*) >= 3 FROM dl_schedule_runs WHERE "
                                                 "schedule_name = 'normal'"), timeout=20,
                             message="the normal schedule to tick three times")
            await wait_until(lambda: db.fetchval("SELECT count(*) = 1 FROM dl_observers WHERE name = 'normal-obs' "
                                                 "AND state = 'processing'"), timeout=20,
                             message="the normal observer to run")
            await wait_until(lambda: db.fetchval("SELECT count(*) = 1 FROM dl_process_events WHERE ns = $1 AND "
                                                 "process_id = 'normal-p' AND payload->>'kind' = 'timeout'", ns),
                             timeout=20, message="the normal process's timer to fire")
            done = await app.operations.wait(op.id, timeout=20)
            assert (done.state, done.total, done.done, done.changed) == ("finished", 3, 3, 3), done
            for odd in ("odd-op-0", "odd-op-3"):  # lease over: taken and run to an end
                await wait_until(lambda o=odd: db.fetchval("SELECT state IN ('finished', 'failed') FROM dl_operations "
                                                           "WHERE operation_id = $1", odd_ops[o]), timeout=20,
                                 message=f"{odd} to end")
            await wait_until(lambda: db.fetchval("SELECT count(*) = 2 FROM dl_nodes WHERE name IN "
                                                 "('odd-node-0', 'odd-node-3') AND state = 'dead'"), timeout=20,
                             message="the nodes silent since -infinity and 4713 BC to be marked dead")
            await wait_until(lambda: db.fetchval("SELECT paused FROM dl_schedules WHERE name = 'odd-bad-every'"),
                             timeout=20, message="the schedule that cannot be computed to be paused")
            await _all_routes_answer(http, db, ns)

    # schedules: due since -infinity / 4713 BC -> one job for the latest tick, then a real next tick;
    # due at +infinity / 294276 AD -> never due, still running, no job
    rows = {r["name"]: r for r in await db.fetch("SELECT s.name, s.next_run_at, s.paused, count(r.tick_at) AS runs "
                                                  "FROM dl_schedules s LEFT JOIN dl_schedule_runs r ON "
                                                  "r.schedule_name = s.name GROUP BY s.name")}
    for timing in ("cron", "every_ms"):
        for i in (0, 3):
            row = rows[f"odd-{timing}-{i}"]
            assert row["runs"] >= 1 and not row["paused"], row
        for i in (1, 2):
            row = rows[f"odd-{timing}-{i}"]
            assert row["runs"] == 0 and not row["paused"] and row["next_run_at"].year == 9999, row
    # odd-huge is due now and hourly: its first tick, plus the top of the hour when the test ran across
    # one (then the scheduler may not have fired that one yet)
    crossed = await db.fetchval("SELECT date_trunc('hour', now()) > date_trunc('hour', created_at) FROM dl_schedules "
                                "WHERE name = 'odd-huge'")
    assert 1 <= rows["odd-huge"]["runs"] <= 1 + crossed, (rows["odd-huge"], crossed)
    assert rows["odd-bad-every"]["runs"] == 0
    # observers: those due since the past ran (the node's heartbeat, which reads the soonest
    # restart_at, never failed: no error logged); those due at the far end wait for it
    started = {r["name"] for r in await db.fetch("SELECT DISTINCT name FROM test_observer_events WHERE kind = 'start'")}
    assert started == {"odd-obs-0", "odd-obs-3", "odd-obs-huge", "normal-obs"}, started
    # operations held by a lease until infinity stay with their holder, untouched
    held = await db.fetch("SELECT state, lease_owner FROM dl_operations WHERE operation_id = ANY($1)",
                          [odd_ops["odd-op-1"], odd_ops["odd-op-2"]])
    assert [tuple(r) for r in held] == [("running", "someone")] * 2
    # processes: the restart armed the infinite timer at the far end; nothing is in error
    timer = await db.fetchrow("SELECT timer_type, timer_at FROM dl_processes WHERE ns = $1 AND id = 'odd-p1'", ns)
    assert timer["timer_type"] == "timeout" and timer["timer_at"].year == 9999, timer
    assert await db.fetchval("SELECT count(*) FROM dl_processes WHERE ns = $1 AND status = 'error'", ns) == 0
    assert await db.fetchval("SELECT count(*) FROM dl_jobs WHERE job_id = ANY($1) AND status = 'canceled'",
                             queued) == 3

    errors = [f"{r.name}: {r.getMessage()[:300]}" for r in caplog.records if r.levelno >= logging.ERROR]
    assert errors == ["dataloader.schedules: schedule 'odd-bad-every' cannot be computed (InvalidTiming: every "
                      "must be between 1 second and 366 days); it is paused"], errors


@pytest.mark.parametrize("timing", [Timing(cron="*/5 * * * *", tz="Pacific/Kiritimati"),
                                    Timing(cron="0 3 * * *", tz="America/Adak"),
                                    Timing(every=timedelta(seconds=1))], ids=["cron+14", "cron-10", "every"])
def test_ticks_are_computed_from_any_time_a_row_decodes_to(timing):
    """next_run_at of +-infinity, 294276 AD or 4713 BC decodes to datetime.max/min (storage/db.py);
    the tick computation takes them without leaving Python's date range."""
    now = datetime.now(UTC)
    lowest, highest = datetime.min.replace(tzinfo=UTC), datetime.max.replace(tzinfo=UTC)
    assert next_tick(timing, highest) is None and next_ticks(timing, highest, 5) == []
    assert plan(timing, highest, now).enqueue == ()
    assert datetime(1970, 1, 1, tzinfo=UTC) <= next_tick(timing, lowest) < now
    decision = plan(timing, lowest, now, missed="catch_up", catch_up_limit=3)
    assert len(decision.enqueue) == 3 and decision.skipped > 0 and now < decision.next_run_at < now + timedelta(days=1)


def test_times_read_back_from_json_are_clamped_like_the_column():
    assert parse_timestamptz_text("infinity") == datetime.max.replace(tzinfo=UTC)
    assert parse_timestamptz_text("-infinity") == datetime.min.replace(tzinfo=UTC)
    assert parse_timestamptz_text("294276-12-31T23:59:59+00:00") == datetime.max.replace(tzinfo=UTC)
    assert parse_timestamptz_text("4713-01-01T00:00:00+00:00 BC") == datetime.min.replace(tzinfo=UTC)
    assert parse_timestamptz_text("2030-01-02T03:04:05.123456+02:00") == datetime(2030, 1, 2, 1, 4, 5, 123456,
                                                                                    tzinfo=UTC)
    with pytest.raises(ValueError):
        parse_timestamptz_text("not a time")
