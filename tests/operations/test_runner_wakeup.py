"""The operation runner does not poll: with its backstop look an hour away, a started or resumed
operation (NOTIFY), an operation handed back by a stopping runner (NOTIFY), and one whose runner
died (its lease runs out) are all taken within seconds. Each test fails if its wake-up is removed:
the runner would wait out the hour."""

from __future__ import annotations

from dataloader.operations.runner import OperationRunner, OperationRunnerSettings
from dataloader.storage.operation_repository import OperationRepository
from tests.conftest import wait_until
from tests.retention.rows import add_job

NEVER = 3600.0  # the backstop look: no test here may depend on it


def sleepy_runner(db, dsn, owner: str, **settings: float) -> OperationRunner:
    values = {"period_sec": NEVER, "jitter": 0.0, "lease_sec": 30.0, "retry_pause_sec": 0.05, **settings}
    return OperationRunner(OperationRepository(db), OperationRunnerSettings(**values), owner=owner, dsn=dsn)


async def finished(ops, operation_id) -> bool:
    return (await ops.get(operation_id)).state == "finished"


async def test_started_and_resumed_operations_wake_an_idle_runner(app_on_db, db, dsn):
    for i in range(6):
        await add_job(db, queue="wake-a", status="failed", finished_ago=100 + i)
        await add_job(db, queue="wake-b", status="failed", finished_ago=100 + i)
    ops = app_on_db.operations
    paused = await ops.start("requeue", {"queues": ["wake-b"]}, batch_size=2)
    await ops.pause(paused.id)
    run = sleepy_runner(db, dsn, "idle-node")
    await run.start()
    try:
        await wait_until(lambda: run.ticks >= 1, message="the runner's first look (nothing to take)")
        started = await ops.start("requeue", {"queues": ["wake-a"]}, batch_size=2)
        await wait_until(lambda: finished(ops, started.id), timeout=15, message="the started operation")
        await ops.resume(paused.id)
        await wait_until(lambda: finished(ops, paused.id), timeout=15, message="the resumed operation")
    finally:
        await run.stop()
    assert (await ops.get(started.id)).changed == 6 and (await ops.get(paused.id)).changed == 6


async def test_a_dead_runners_operation_is_taken_when_its_lease_runs_out(app_on_db, db, dsn):
    for i in range(4):
        await add_job(db, queue="wake-dead", status="failed", finished_ago=100 + i)
    ops = app_on_db.operations
    op = await ops.start("requeue", {"queues": ["wake-dead"]}, batch_size=2)
    taken = await OperationRepository(db).claim("dead-node", 3.0)  # then never renewed: it died
    assert taken is not None
    run = sleepy_runner(db, dsn, "survivor")
    await run.start()
    try:
        await wait_until(lambda: finished(ops, op.id), timeout=15, message="the takeover at the lease's end")
    finally:
        await run.stop()
    trail = await ops.events(op.id)
    assert [(e.kind, e.actor) for e in trail if e.kind == "taken_over"] == [("taken_over", "survivor")]


async def test_a_stopping_runner_hands_its_operation_to_an_idle_one_at_once(app_on_db, db, dsn):
    for i in range(400):
        await add_job(db, queue="wake-hand", status="failed", finished_ago=100 + i)
    ops = app_on_db.operations
    op = await ops.start("requeue", {"queues": ["wake-hand"]}, batch_size=2)
    first = sleepy_runner(db, dsn, "leaving", batch_pause_sec=0.05)
    second = sleepy_runner(db, dsn, "staying")
    await first.start()
    try:
        await wait_until(lambda: _held_by(ops, op.id, "leaving"), message="the first runner working it")
        await second.start()
        # Its first look finds the lease held for 30 s: without the hand-back NOTIFY it would wait.
        await wait_until(lambda: second.ticks >= 1, message="the second runner's first look")
        await first.stop()
        await wait_until(lambda: finished(ops, op.id), timeout=15, message="the hand-over")
    finally:
        await first.stop()
        await second.stop()
    final = await ops.get(op.id)
    assert (final.done, final.changed) == (400, 400)
    actors = {e.actor for e in await ops.events(op.id) if e.kind in ("started", "taken_over")}
    assert actors == {"leaving", "staying"}


async def _held_by(ops, operation_id, owner: str) -> bool:
    op = await ops.get(operation_id)
    return op.lease_owner == owner and op.done > 0
