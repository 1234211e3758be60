"""Bulk operations with real worker processes (`python -m dataloader worker`, each running the
operation runner): a bulk requeue of failed jobs while those workers drain the queue, every job run
exactly once more; and the node running an operation killed with kill -9 mid-way, another node
finishing it with exact counts.

The requeue test runs 10,000 jobs in the suite; the issue's full size is a documented command:
    DL_OPS_BULK_JOBS=100000 DL_TEST_DSN=... .venv/bin/python -m pytest -q \
        tests/operations/test_bulk_processes.py -k while_workers_run
"""

from __future__ import annotations

import asyncio
import os
import signal

from tests.conftest import wait_until

FAST_RUNNER = {"operations_period_sec": 0.1, "operations_lease_sec": 2, "reaper_period_sec": 0.5}


async def add_failed(db, queue: str, n: int) -> None:
    """n failed dl.noop jobs (attempt 1 of 1) created over the last hours, oldest first."""
    await db.execute(
        "INSERT INTO dl_jobs (job_id, queue, task, lock_key, status, attempt, max_attempts, created_at, "
        "available_at, started_at, finished_at, error) "
        "SELECT gen_random_uuid(), $1, 'dl.noop', 'k' || g, 'failed', 1, 1, now() - make_interval(secs => g), "
        "now() - make_interval(secs => g), now() - make_interval(secs => g), now() - make_interval(secs => g), "
        "'ConnectionError: bad deploy' FROM generate_series(1, $2::int) g", queue, n)


async def test_kill9_of_the_runner_node_another_node_finishes_it_exactly(app_on_db, db, workers):
    n = 3000
    await add_failed(db, "k9", n)
    a = workers(queues={"idle-a": 1}, node_name="node-a", operations_batch_pause_sec=0.05, **FAST_RUNNER)
    await a.wait_ready()
    op = await app_on_db.operations.start("requeue", {"queues": ["k9"], "statuses": ["failed"]}, batch_size=40,
                                          started_by="test")
    assert op.total == n

    async def midway() -> bool:
        now = await app_on_db.operations.get(op.id)
        return now.lease_owner == "node-a" and now.done >= 400

    await wait_until(midway, timeout=60, message="node-a working the operation")
    a.signal(signal.SIGKILL)
    await a.wait_exit()
    at_kill = await app_on_db.operations.get(op.id)
    assert 0 < at_kill.done < n, at_kill
    b = workers(queues={"idle-b": 1}, node_name="node-b", **FAST_RUNNER)
    await b.wait_ready()
    final = await app_on_db.operations.wait(op.id, timeout=90, interval=0.1)
    assert (final.state, final.total, final.done, final.changed) == ("finished", n, n, n)
    per_job = await db.fetch(
        "SELECT j.job_id, j.status::text AS status, count(e.event_id) AS bulk FROM dl_jobs j "
        "LEFT JOIN dl_job_events e ON e.job_id = j.job_id AND e.payload->>'operation_id' = $1 "
        "WHERE j.queue = 'k9' GROUP BY j.job_id, j.status", str(op.id))
    assert len(per_job) == n and {(r["status"], r["bulk"]) for r in per_job} == {("queued", 1)}
    trail = await app_on_db.operations.events(op.id)
    takeovers = [e for e in trail if e.kind == "taken_over"]
    assert len(takeovers) == 1 and takeovers[0].actor == "node-b"
    assert takeovers[0].payload["previous_owner"] == "node-a"
    assert [e.kind for e in trail][-1] == "finished"


async def test_bulk_requeue_while_workers_run_every_job_runs_exactly_once_more(app_on_db, db, workers):
    n = int(os.environ.get("DL_OPS_BULK_JOBS", "10000"))
    await add_failed(db, "bulk", n)
    nodes = [workers(queues={"bulk": 8}, node_name=f"bulk-{i}", **FAST_RUNNER) for i in range(2)]
    await asyncio.gather(*(w.wait_ready() for w in nodes))
    op = await app_on_db.operations.start("requeue", {"queues": ["bulk"], "statuses": ["failed"],
                                                      "error": "ConnectionError*"}, batch_size=500, started_by="test")
    assert op.total == n
    progress: list[int] = []

    async def finished() -> bool:
        now = await app_on_db.operations.get(op.id)
        progress.append(now.done)
        return now.ended

    await wait_until(finished, timeout=600, interval=0.2, message="the bulk requeue to finish")
    final = await app_on_db.operations.get(op.id)
    assert (final.state, final.done, final.changed) == ("finished", n, n)
    assert progress == sorted(progress) and progress[-1] == n  # progress only moves forward

    async def drained() -> bool:
        return await db.fetchval("SELECT count(*) FROM dl_jobs WHERE queue = 'bulk' AND status <> 'succeeded'") == 0

    await wait_until(drained, timeout=600, interval=0.5, message="the workers to run every requeued job")
    # exactly once more: one bulk requeue, then one claim and one success per job, attempt 2
    shape = await db.fetch(
        "SELECT j.attempt, count(*) FILTER (WHERE e.kind = 'picked') AS picked, "
        "count(*) FILTER (WHERE e.kind = 'done') AS done, "
        "count(*) FILTER (WHERE e.payload->>'operation_id' = $1) AS bulk "
        "FROM dl_jobs j JOIN dl_job_events e ON e.job_id = j.job_id WHERE j.queue = 'bulk' "
        "GROUP BY j.job_id, j.attempt", str(op.id))
    assert len(shape) == n
    assert {tuple(r) for r in shape} == {(2, 1, 1, 1)}, {tuple(r) for r in shape}
