"""`App.enqueue_many` of a batch larger than one chunk (storage/batch_pipeline.py): the chunks go
one after another on one connection, each built while the server inserts the one before, and the
whole batch is still one transaction: all of it or nothing, the same ids, errors and idempotency
outcomes as one statement. The chunk size is made small here so a few dozen jobs are a pipeline."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import asyncpg
import pytest

from dataloader import App, Settings
from dataloader.exceptions import ArgsTooLarge, ValidationFailed
from dataloader.jobs import manager
from dataloader.storage.batch_pipeline import BatchPipeline

CHUNK = 10


@pytest.fixture
async def app(db: asyncpg.Pool, dsn: str) -> AsyncIterator[App]:
    async with App(Settings(db_dsn=dsn, workers=[], max_args_bytes=1000)) as opened:
        yield opened


@pytest.fixture
def chunks(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Chunks of CHUNK jobs; the sizes of the chunks sent, in order."""
    monkeypatch.setattr(manager, "CHUNK_JOBS", CHUNK)
    monkeypatch.setattr(manager, "PIPELINE_FROM_JOBS", CHUNK)
    sent: list[int] = []
    send = BatchPipeline.send

    async def counting_send(self: BatchPipeline, columns: tuple[list[Any], ...], timeouts: list[int | None]) -> None:
        sent.append(len(columns[0]))
        await send(self, columns, timeouts)

    monkeypatch.setattr(BatchPipeline, "send", counting_send)
    return sent


async def _rows(db: asyncpg.Pool) -> tuple[int, int]:
    return (await db.fetchval("SELECT count(*) FROM dl_jobs"),
            await db.fetchval("SELECT count(*) FROM dl_job_events WHERE kind = 'queued'"))


async def test_a_batch_of_several_chunks_is_one_transaction_in_input_order(app, db, chunks):
    ids = await app.enqueue_many([{"task": "dl.noop", "args": {"i": i}, "priority": i} for i in range(35)])
    assert chunks == [10, 10, 10, 5]
    rows = {r["job_id"]: r["priority"] for r in await db.fetch("SELECT job_id, priority FROM dl_jobs")}
    assert [rows[i] for i in ids] == list(range(35))
    assert await _rows(db) == (35, 35), "each job has its queued journal row"
    # One transaction wrote every row (and every journal row): they share its xid.
    assert await db.fetchval("SELECT count(DISTINCT xmin::text) FROM dl_jobs") == 1
    assert await db.fetchval("SELECT count(DISTINCT xmin::text) FROM dl_job_events") == 1


@pytest.mark.parametrize(("bad", "error"), [
    ({"task": "dl.noop", "priority": -1}, ValidationFailed),  # refused by validation (prepare)
    ({"task": "dl.noop", "args": {"x": "y" * 2000}}, ArgsTooLarge),  # refused while building the arrays
])
async def test_a_bad_job_in_a_later_chunk_writes_nothing_and_says_what_one_statement_says(
        app, db, chunks, monkeypatch, bad, error):
    jobs = [{"task": "dl.noop", "args": {"i": i}} for i in range(35)]
    jobs[27] = bad
    with pytest.raises(error) as pipelined:
        await app.enqueue_many(jobs)
    assert chunks == [10, 10], "the first two chunks were sent before the bad one"
    assert await _rows(db) == (0, 0)
    monkeypatch.setattr(manager, "PIPELINE_FROM_JOBS", 1000)
    with pytest.raises(error) as one_statement:
        await app.enqueue_many(jobs)
    assert str(pipelined.value) == str(one_statement.value)
    assert await _rows(db) == (0, 0)
    assert len(await app.enqueue_many(jobs[:20])) == 20, "the pool's connections are still usable"


async def test_a_key_repeated_in_a_later_chunk_is_skipped_as_in_one_statement(app, db, chunks, monkeypatch):
    jobs = [{"task": "dl.noop", "idempotency_key": f"k{i % 15}"} for i in range(35)]
    ids = await app.enqueue_many(jobs)
    assert chunks == [10, 10, 10, 5]
    assert len(ids) == 15 and len(set(ids)) == 15
    stored = {r["idempotency_key"]: r["job_id"] for r in await db.fetch("SELECT job_id, idempotency_key FROM dl_jobs")}
    assert ids == [stored[f"k{i}"] for i in range(15)], "the first job of each key, in input order"
    assert await app.enqueue_many(jobs) == [], "every key is known now"
    assert await _rows(db) == (15, 15)


async def test_a_cancelled_batch_writes_nothing_and_leaves_the_pool_usable(app, db, chunks, monkeypatch):
    second_sent = asyncio.Event()
    send = BatchPipeline.send

    async def send_then_signal(self: BatchPipeline, columns: tuple[list[Any], ...], timeouts: list[int | None]) -> None:
        await send(self, columns, timeouts)
        if len(chunks) == 2:
            second_sent.set()
            await asyncio.Event().wait()  # the caller is cancelled here, a chunk in flight or done

    monkeypatch.setattr(BatchPipeline, "send", send_then_signal)
    async with asyncio.TaskGroup() as group:
        batch = group.create_task(app.enqueue_many([{"task": "dl.noop"} for _ in range(35)]))
        await second_sent.wait()
        batch.cancel()
    assert batch.cancelled()
    assert await _rows(db) == (0, 0)
    assert len(await app.enqueue_many([{"task": "dl.noop"} for _ in range(25)])) == 25
    assert await _rows(db) == (25, 25)
