"""The last slot of a limit, taken by two claims at once, driven step by step at the SQL level
(promise 12): no race is hoped for, each interleaving is forced.

Claim A runs the limited claim statement in a transaction that it holds open, taking the last slot
(of the queue's concurrency, of a partition key's, of a task's, or the last start of a rate's
window). Claim B, on another connection, runs the same statement: it must wait (for the gate's
lock on the flow row) or take nothing. A commits; B must then have taken nothing of what the limit
holds. The test waits until B is seen blocked on a lock in pg_stat_activity (or done), so the
interleaving is the one named whatever the machine's speed. With the gate's `FOR UPDATE` removed
(B's gate then counts in a snapshot without A's uncommitted start) each of these fails: B takes a
second slot.

The three-node tests (test_limits_nodes.py, test_task_limits_nodes.py) remain: they check the whole
path (workers, NOTIFY, reaper) with real processes; these check the gate's serialisation itself."""

from __future__ import annotations

import asyncio
import uuid

import asyncpg

from dataloader import App
from dataloader.storage.queue_connection import ClaimBatch, QueueConnection
from tests.conftest import wait_until
from tests.support.engine import enqueue


async def blocked_or_done(db: asyncpg.Pool, conn: asyncpg.Connection, task: asyncio.Task) -> None:
    """Until `task` (a statement on `conn`) is done, or waits on a lock (seen from the server)."""
    pid = conn.get_server_pid()

    async def settled() -> bool:
        return task.done() or await db.fetchval(
            "SELECT wait_event_type = 'Lock' FROM pg_stat_activity WHERE pid = $1", pid) is True
    await wait_until(settled, timeout=10, message="claim B to wait on a lock or finish")


async def race_for_the_last_slot(db: asyncpg.Pool, conns: list[asyncpg.Connection], queue: str,
                                 limit_b: int = 4) -> tuple[ClaimBatch, ClaimBatch]:
    """A claims one job in an open transaction; B claims (up to limit_b) meanwhile; A commits."""
    a, b = conns
    tx = a.transaction()
    await tx.start()
    try:
        first = await QueueConnection(a).claim(queue, "node-a", 1, limited=True)
        assert len(first.claimed) == 1, "A must take the last slot"
        other = asyncio.create_task(QueueConnection(b).claim(queue, "node-b", limit_b, limited=True))
        await blocked_or_done(db, b, other)
    finally:
        await tx.commit()
    second = await asyncio.wait_for(other, 10)
    return first, second


async def test_two_claims_for_the_last_slot_of_the_queue(app: App, db, conns):
    queue = f"gate-{uuid.uuid4().hex[:8]}"
    await app.configure_queue(queue, concurrency=2)
    await enqueue(db, "test.recorded_sleep", queue=queue)  # running already: one slot left
    running = await QueueConnection(conns[0]).claim(queue, "node-0", 1, limited=True)
    assert len(running.claimed) == 1
    for _ in range(3):
        await enqueue(db, "test.recorded_sleep", queue=queue)
    _first, second = await race_for_the_last_slot(db, conns, queue)
    assert second.claimed == [], "B took a slot beyond the queue's concurrency"
    assert {s.held for s in second.skipped} == {"concurrency"}
    assert await db.fetchval("SELECT count(*) FROM dl_jobs WHERE queue = $1 AND status = 'running'", queue) == 2


async def test_two_claims_for_the_last_slot_of_a_partition_key(app: App, db, conns):
    queue = f"gate-{uuid.uuid4().hex[:8]}"
    await app.configure_queue(queue, partition_concurrency=1)
    for _ in range(3):
        await enqueue(db, "test.recorded_sleep", queue=queue, partition_key="hot")
    first, second = await race_for_the_last_slot(db, conns, queue)
    assert first.claimed[0].partition_key == "hot"
    assert second.claimed == [], "B took a second slot of the partition key"
    assert await db.fetchval("SELECT count(*) FROM dl_jobs WHERE queue = $1 AND partition_key = 'hot' "
                             "AND status = 'running'", queue) == 1


async def test_two_claims_for_the_last_start_of_the_rate_window(app: App, db, conns):
    queue = f"gate-{uuid.uuid4().hex[:8]}"
    await app.configure_queue(queue, rate_limit=1, rate_period_sec=3600)
    for _ in range(3):
        await enqueue(db, "test.recorded_sleep", queue=queue)
    _first, second = await race_for_the_last_slot(db, conns, queue)
    assert second.claimed == [], "B started a second job in a window that allows one"
    assert await db.fetchval("SELECT count(*) FROM dl_flow_starts WHERE queue = $1", queue) == 1


async def test_two_claims_for_the_last_start_of_a_partition_rate_window(app: App, db, conns):
    queue = f"gate-{uuid.uuid4().hex[:8]}"
    await app.configure_queue(queue, partition_rate_limit=1, partition_rate_period_sec=3600)
    for _ in range(3):
        await enqueue(db, "test.recorded_sleep", queue=queue, partition_key="hot")
    _first, second = await race_for_the_last_slot(db, conns, queue)
    assert second.claimed == [], "B started a second job of the key in a window that allows one"


async def test_two_claims_for_the_last_slot_of_a_task(app: App, db, conns):
    queue = f"gate-{uuid.uuid4().hex[:8]}"
    await app.configure_task(queue, "test.recorded_sleep", concurrency=1)
    for _ in range(3):
        await enqueue(db, "test.recorded_sleep", queue=queue)
    other = await enqueue(db, "dl.noop", queue=queue)
    first, second = await race_for_the_last_slot(db, conns, queue)
    assert first.claimed[0].task == "test.recorded_sleep"
    # the queue's other task is not held back by the task's limit
    assert [c.job_id for c in second.claimed] == [other], "B took a second slot of the task"
    assert {s.held for s in second.skipped} == {"task_concurrency"}


async def test_two_claims_for_the_last_start_of_a_task_rate(app: App, db, conns):
    queue = f"gate-{uuid.uuid4().hex[:8]}"
    await app.configure_task(queue, "test.recorded_sleep", rate_limit=1, rate_period_sec=3600)
    for _ in range(3):
        await enqueue(db, "test.recorded_sleep", queue=queue)
    _first, second = await race_for_the_last_slot(db, conns, queue)
    assert second.claimed == [], "B started a second job of the task in a window that allows one"
    assert await db.fetchval("SELECT count(*) FROM dl_task_starts WHERE queue = $1", queue) == 1
