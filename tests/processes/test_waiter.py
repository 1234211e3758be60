"""The process task waiter (processes/waiter.py): a caller registered before its task exists, while
the listener is up, skips the first read and still never misses the task's end; without a listener,
or for a replayed task of another id, it reads first as before."""

from __future__ import annotations

import asyncio
import uuid

import asyncpg

from dataloader.processes.waiter import CHANNEL, TaskWaiter
from tests.conftest import wait_until


class Reads:
    """A task read that counts its calls and says `ended` once the test ends the task."""

    def __init__(self) -> None:
        self.calls = 0
        self.ended = False

    async def __call__(self) -> str:
        self.calls += 1
        return "ended" if self.ended else "waiting"


def _done(record: str) -> bool:
    return record == "ended"


async def test_an_expected_task_is_read_only_after_its_end_is_heard(db: asyncpg.Pool, dsn: str) -> None:
    waiter = TaskWaiter(dsn)
    task_id = uuid.uuid4()
    try:
        expectation = await waiter.expect(task_id)
        assert expectation.heard_from_start
        reads = Reads()
        waiting = asyncio.create_task(waiter.wait(task_id, reads, _done, 30, expectation))
        await asyncio.sleep(0)  # the wait's first step runs: it parks on the event without a read
        assert reads.calls == 0 and not waiting.done()
        reads.ended = True
        await db.execute("SELECT pg_notify($1, $2)", CHANNEL, str(task_id))
        assert await waiting == (True, "ended")
        assert reads.calls == 1
    finally:
        waiter.forget(expectation)
        await waiter.close()
    assert task_id not in waiter._waiting


async def test_an_end_heard_before_the_wait_begins_is_not_missed(db: asyncpg.Pool, dsn: str) -> None:
    waiter = TaskWaiter(dsn)
    task_id = uuid.uuid4()
    try:
        expectation = await waiter.expect(task_id)
        reads = Reads()
        reads.ended = True  # the task ended while its caller was still inserting it
        await db.execute("SELECT pg_notify($1, $2)", CHANNEL, str(task_id))
        await wait_until(expectation.event.is_set, message="the end heard")
        assert await waiter.wait(task_id, reads, _done, 30, expectation) == (True, "ended")
        assert reads.calls == 1
    finally:
        waiter.forget(expectation)
        await waiter.close()


async def test_without_a_listener_the_first_read_is_not_skipped() -> None:
    waiter = TaskWaiter("postgresql://postgres@127.0.0.1:1/nowhere")
    task_id = uuid.uuid4()
    expectation = await waiter.expect(task_id)
    assert not expectation.heard_from_start
    reads = Reads()
    reads.ended = True
    assert await waiter.wait(task_id, reads, _done, 30, expectation) == (True, "ended")
    assert reads.calls == 1
    waiter.forget(expectation)


async def test_a_replayed_task_of_another_id_is_read_first(db: asyncpg.Pool, dsn: str) -> None:
    waiter = TaskWaiter(dsn)
    expectation = await waiter.expect(uuid.uuid4())
    try:
        reads = Reads()
        reads.ended = True  # the idempotency key named an older task that has already ended
        assert await waiter.wait(uuid.uuid4(), reads, _done, 30, expectation) == (True, "ended")
        assert reads.calls == 1
    finally:
        waiter.forget(expectation)
        await waiter.close()


async def test_a_wait_that_times_out_before_any_read_returns_the_task_as_read(db: asyncpg.Pool, dsn: str) -> None:
    waiter = TaskWaiter(dsn)
    task_id = uuid.uuid4()
    expectation = await waiter.expect(task_id)
    try:
        reads = Reads()
        assert await waiter.wait(task_id, reads, _done, 0, expectation) == (False, "waiting")
        assert reads.calls == 1
    finally:
        waiter.forget(expectation)
        await waiter.close()
