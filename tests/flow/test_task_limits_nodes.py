"""Limits per task (0027) across three real node processes racing on one queue: `dataloader worker`
children, each with more local slots than the task's limit, and a second task of the queue beside
it. As in test_limits_nodes.py the proof is what the pipelines recorded from inside each run
(test_runs), and for a rate the starts the gate counted (dl_task_starts, its clock after its lock),
each matched to its recorded run."""

from __future__ import annotations

import signal
import uuid

from tests.conftest import wait_until
from tests.flow.test_limits import max_in_window, max_overlap
from tests.flow.test_limits_nodes import NODE, all_succeeded, limited_app
from tests.support.engine import enqueue

SLEEP, OTHER = "test.recorded_sleep", "test.recorded_other"


async def _runs(db, ids):
    return await db.fetch("SELECT r.job_id, r.pid, r.started_at, r.ended_at, j.task FROM test_runs r "
                          "JOIN dl_jobs j USING (job_id) WHERE r.job_id = ANY($1) ORDER BY r.started_at", ids)


async def test_a_task_concurrency_is_never_exceeded_by_three_nodes(dsn, db, workers):
    queue = f"tnodes-{uuid.uuid4().hex[:8]}"
    app = await limited_app(dsn)
    try:
        await app.configure_task(queue, SLEEP, concurrency=3)
    finally:
        await app.close()
    limited = [await enqueue(db, SLEEP, args={"dsn": dsn, "seconds": 0.25, "chunks": 1}, queue=queue,
                             lock_key=f"a{i}") for i in range(30)]
    other = [await enqueue(db, OTHER, args={"dsn": dsn, "seconds": 0.25, "chunks": 1}, queue=queue,
                           lock_key=f"b{i}") for i in range(12)]
    nodes = [workers(queues={queue: 4}, **NODE) for _ in range(3)]
    for node in nodes:
        await node.wait_ready()
    await all_succeeded(db, limited + other, 90)
    runs = await _runs(db, limited + other)
    assert len(runs) == 42
    assert max_overlap([(r["started_at"], r["ended_at"]) for r in runs if r["task"] == SLEEP]) == 3
    # the queue's other task is not capped: it ran beyond the limited task's three at some instant
    assert max_overlap([(r["started_at"], r["ended_at"]) for r in runs if r["task"] == OTHER]) > 3
    assert len({r["pid"] for r in runs if r["task"] == SLEEP}) >= 2, "the nodes raced for the limited task"


async def test_a_task_rate_is_never_exceeded_in_any_window_by_three_nodes(dsn, db, workers):
    queue = f"tnodes-r-{uuid.uuid4().hex[:8]}"
    app = await limited_app(dsn)
    try:
        await app.configure_task(queue, SLEEP, rate_limit=5, rate_period_sec=1)
    finally:
        await app.close()
    nodes = [workers(queues={queue: 4}, **NODE) for _ in range(3)]
    for node in nodes:
        await node.wait_ready()
    ids = [await enqueue(db, SLEEP, args={"dsn": dsn, "seconds": 0.01, "chunks": 1}, queue=queue,
                         lock_key=f"k{i}") for i in range(22)]
    await all_succeeded(db, ids, 90)
    counted = await db.fetch("SELECT s.started_at AS counted, r.started_at AS ran, r.pid FROM dl_task_starts s "
                             "JOIN test_runs r USING (job_id) WHERE s.queue = $1 AND s.job_id = ANY($2)", queue, ids)
    assert len(counted) == 22, "every run was counted as a start of the task by the claim, once"
    assert all(r["ran"] >= r["counted"] for r in counted)
    starts = [r["counted"] for r in counted]
    assert max_in_window(starts, 1.0) == 5
    assert (max(starts) - min(starts)).total_seconds() >= 4.0  # 22 starts at 5 per second: 5 windows at least
    assert len({r["pid"] for r in counted}) >= 2, "the nodes raced for the rate"


async def test_a_node_killed_holding_a_tasks_slots_gives_them_back_within_the_lease(dsn, db, workers):
    queue = f"tnodes-k-{uuid.uuid4().hex[:8]}"
    app = await limited_app(dsn)
    try:
        await app.configure_task(queue, SLEEP, concurrency=2)
    finally:
        await app.close()
    settings = {**NODE, "reaper_period_sec": 0.5, "heartbeat_sec": 0.5}
    victim = workers(queues={queue: 4}, **settings)
    await victim.wait_ready()
    lease = 3
    held = [await enqueue(db, SLEEP, args={"dsn": dsn, "first_seconds": 60, "seconds": 0.2, "chunks": 20},
                          queue=queue, lock_key=f"h{i}", lease_ttl_sec=lease) for i in range(2)]

    async def victim_holds_both() -> bool:
        return await db.fetchval("SELECT count(*) FROM test_runs WHERE job_id = ANY($1) AND pid = $2",
                                 held, victim.pid) == 2
    await wait_until(victim_holds_both, timeout=20, message="the first node holds both of the task's slots")
    others = [workers(queues={queue: 4}, **settings) for _ in range(2)]
    for node in others:
        await node.wait_ready()
    waiting = [await enqueue(db, SLEEP, args={"dsn": dsn, "seconds": 0.3, "chunks": 3}, queue=queue,
                             lock_key=f"w{i}", lease_ttl_sec=lease) for i in range(6)]
    ids = held + waiting
    victim.signal(signal.SIGKILL)
    assert await victim.wait_exit() == -signal.SIGKILL
    killed_at = await db.fetchval("SELECT clock_timestamp()")
    assert await db.fetchval("SELECT count(*) FROM test_runs WHERE job_id = ANY($1)", waiting) == 0, \
        "nothing else of the task started while the victim held both slots"
    await all_succeeded(db, ids, 90)
    runs = await db.fetch("SELECT r.pid, r.started_at, r.ended_at FROM test_runs r WHERE r.job_id = ANY($1) "
                          "ORDER BY r.started_at", ids)
    after = [r for r in runs if r["pid"] != victim.pid]
    assert len(after) == 8
    # the slots came back within the lease and a reaper period, plus a claim's time on a loaded machine
    assert (min(r["started_at"] for r in after) - killed_at).total_seconds() < lease + 0.5 + 2.0
    assert max_overlap([(r["started_at"], r["ended_at"] or killed_at) for r in runs]) == 2
