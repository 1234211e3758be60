"""The limits enforced (issue 21): global concurrency per queue and per partition key, and rate
limits per queue and per partition key, on one node of real workers (in-process, real PostgreSQL),
checked by what the pipelines themselves recorded (test_runs: each run's start and end, written
from inside the run), not by dl_jobs' status. The race of three real node processes is
test_limits_nodes.py.

Each run of test.recorded_sleep records its start after it began and its end before it returns,
so two runs whose records overlap did run at the same time: a limit broken by the claim shows
here as more overlapping records than the limit."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from datetime import datetime

import asyncpg
import pytest

from dataloader import App, Queue, Settings
from dataloader.model.flow import QueueSettings, held_back
from tests.conftest import wait_until
from tests.support.engine import enqueue


@pytest.fixture
async def app(db, dsn: str) -> AsyncIterator[App]:
    app = await App(Settings(db_dsn=dsn, workers=[], poll_fallback_sec=30, pipeline_modules="tests.support.pipelines")
                    ).open()
    try:
        yield app
    finally:
        await app.close()


def max_overlap(intervals: list[tuple[datetime, datetime]]) -> int:
    """The most intervals that share one instant."""
    events = sorted([(s, 1) for s, _ in intervals] + [(e, -1) for _, e in intervals], key=lambda x: (x[0], x[1]))
    live = peak = 0
    for _, step in events:
        live += step
        peak = max(peak, live)
    return peak


def max_in_window(times: list[datetime], period: float) -> int:
    """The most of `times` in any window [t, t + period) (period in seconds)."""
    times = sorted(times)
    peak = start = 0
    for end, t in enumerate(times):
        while (t - times[start]).total_seconds() >= period:
            start += 1
        peak = max(peak, end - start + 1)
    return peak


def test_the_probes_count_what_they_say():
    t = [datetime.fromtimestamp(x) for x in (0, 0.5, 0.9, 1.0, 1.2, 2.5)]
    assert max_in_window(t, 1.0) == 4 and max_in_window(t, 1.3) == 5
    assert max_overlap([(t[0], t[2]), (t[1], t[3]), (t[3], t[4])]) == 2


def test_held_back_counts_each_limit_on_its_own():
    s = QueueSettings(concurrency=3, rate_limit=10, rate_period_sec=1)
    assert held_back(s, running=2, runnable=5, starts=8) == {
        "concurrency": 4, "partition_concurrency": 0, "rate": 3, "partition_rate": 0}
    assert held_back(QueueSettings(), running=50, runnable=5, starts=50) == dict.fromkeys(
        ("concurrency", "partition_concurrency", "rate", "partition_rate"), 0)
    assert held_back(QueueSettings(concurrency=1), running=4, runnable=5, starts=0)["concurrency"] == 5


async def runs_of(db: asyncpg.Pool, ids: list[uuid.UUID]) -> list[asyncpg.Record]:
    return await db.fetch("SELECT r.job_id, r.started_at, r.ended_at, j.partition_key FROM test_runs r "
                          "JOIN dl_jobs j USING (job_id) WHERE r.job_id = ANY($1) ORDER BY r.started_at", ids)


async def drain(db: asyncpg.Pool, ids: list[uuid.UUID], timeout: float) -> None:
    async def done() -> bool:
        return await db.fetchval("SELECT count(*) FROM dl_jobs WHERE job_id = ANY($1) AND status = 'succeeded'",
                                 ids) == len(ids)
    await wait_until(done, timeout=timeout, interval=0.1, message="the limited queue's jobs finish")


async def test_global_concurrency_holds_on_a_node_with_more_local_slots(app, db, dsn):
    queue = f"conc-{uuid.uuid4().hex[:8]}"
    await app.configure_queue(queue, concurrency=3)
    ids = [await enqueue(db, "test.recorded_sleep", args={"dsn": dsn, "seconds": 0.3, "chunks": 3}, queue=queue,
                         lock_key=f"k{i}") for i in range(12)]
    async with app.running(queues=[Queue(queue, 8)], reaper=False):
        await drain(db, ids, 30)
    runs = await runs_of(db, ids)
    assert len(runs) == 12
    assert max_overlap([(r["started_at"], r["ended_at"]) for r in runs]) == 3  # the limit, and used


async def test_partition_concurrency_holds_and_other_partitions_go_on(app, db, dsn):
    queue = f"part-{uuid.uuid4().hex[:8]}"
    await app.configure_queue(queue, partition_concurrency=1)
    hot = [await enqueue(db, "test.recorded_sleep", args={"dsn": dsn, "seconds": 0.2, "chunks": 2}, queue=queue,
                         lock_key=f"h{i}", partition_key="hot") for i in range(6)]
    cold = [await enqueue(db, "test.recorded_sleep", args={"dsn": dsn, "seconds": 0.2, "chunks": 2}, queue=queue,
                          lock_key=f"c{i}", partition_key=f"cold{i}") for i in range(4)]
    async with app.running(queues=[Queue(queue, 6)], reaper=False):
        await drain(db, hot + cold, 30)
    runs = await runs_of(db, hot + cold)
    hot_runs = [(r["started_at"], r["ended_at"]) for r in runs if r["partition_key"] == "hot"]
    assert max_overlap(hot_runs) == 1
    # the cold keys did not wait behind the hot key's backlog: they ran beside its first job
    first_hot_end = min(end for _, end in hot_runs)
    assert all(r["started_at"] < first_hot_end for r in runs if r["partition_key"] != "hot")


async def test_a_queue_rate_holds_in_every_window(app, db, dsn):
    queue = f"rate-{uuid.uuid4().hex[:8]}"
    await app.configure_queue(queue, rate_limit=4, rate_period_sec=0.5)
    ids = [await enqueue(db, "test.recorded_sleep", args={"dsn": dsn, "seconds": 0.01, "chunks": 1}, queue=queue,
                         lock_key=f"k{i}") for i in range(14)]
    async with app.running(queues=[Queue(queue, 8)], reaper=False):
        await drain(db, ids, 30)
    # the starts the claim counted (the gate's clock, after its lock): never more than 4 in 0.5 s
    starts = [r["started_at"] for r in await db.fetch(
        "SELECT started_at FROM dl_flow_starts WHERE queue = $1 AND job_id = ANY($2)", queue, ids)]
    assert len(starts) == 14
    assert max_in_window(starts, 0.5) == 4
    # every run the pipelines recorded began after its counted start: each start was counted
    recorded = await db.fetch("SELECT r.started_at AS ran, s.started_at AS counted FROM test_runs r "
                              "JOIN dl_flow_starts s USING (job_id) WHERE r.job_id = ANY($1)", ids)
    assert len(recorded) == 14 and all(r["ran"] >= r["counted"] for r in recorded)
    # 14 starts at 4 per 0.5 s take at least three full windows
    assert (max(starts) - min(starts)).total_seconds() >= 1.5


async def test_a_period_lengthened_by_the_start_delay_keeps_the_handlers_within_the_limit(app, db, dsn):
    """docs/flow-control.md "Where a partner sees the rate": the rate holds on the claims, and the
    handlers begin a little after theirs, so a strict window of handler starts may see up to twice
    the limit. Configured as N per (P + J), any P-long window of handler starts holds at most N, as
    long as every handler began within J of its claim. Checked here on what the handlers recorded
    (their start, written from inside the run) with P = 0.5 s, J = 0.25 s."""
    period, jitter, limit = 0.5, 0.25, 4
    queue = f"rate-j-{uuid.uuid4().hex[:8]}"
    await app.configure_queue(queue, rate_limit=limit, rate_period_sec=period + jitter)
    ids = [await enqueue(db, "test.recorded_sleep", args={"dsn": dsn, "seconds": 0.01, "chunks": 1}, queue=queue,
                         lock_key=f"k{i}") for i in range(12)]
    async with app.running(queues=[Queue(queue, 8)], reaper=False):
        await drain(db, ids, 30)
    recorded = await db.fetch("SELECT r.started_at AS ran, s.started_at AS counted FROM test_runs r "
                              "JOIN dl_flow_starts s USING (job_id) WHERE r.job_id = ANY($1)", ids)
    assert len(recorded) == 12
    delays = [(r["ran"] - r["counted"]).total_seconds() for r in recorded]
    assert min(delays) >= 0
    if max(delays) > jitter:
        pytest.skip(f"a handler began {max(delays):.3f} s after its claim, past J = {jitter} s (machine too loaded)")
    assert max_in_window([r["ran"] for r in recorded], period) <= limit


async def test_a_partition_rate_holds_per_key(app, db, dsn):
    queue = f"prate-{uuid.uuid4().hex[:8]}"
    await app.configure_queue(queue, partition_rate_limit=2, partition_rate_period_sec=0.5)
    ids = [await enqueue(db, "test.recorded_sleep", args={"dsn": dsn, "seconds": 0.01, "chunks": 1}, queue=queue,
                         lock_key=f"k{i}", partition_key=f"p{i % 2}") for i in range(10)]
    async with app.running(queues=[Queue(queue, 8)], reaper=False):
        await drain(db, ids, 30)
    rows = await db.fetch("SELECT partition_key, started_at FROM dl_flow_starts WHERE queue = $1", queue)
    assert len(rows) == 10
    for key in ("p0", "p1"):
        assert max_in_window([r["started_at"] for r in rows if r["partition_key"] == key], 0.5) == 2


async def test_held_back_jobs_show_and_raising_the_limit_wakes_them(app, db, dsn):
    queue = f"held-{uuid.uuid4().hex[:8]}"
    await app.configure_queue(queue, concurrency=1)
    ids = [await enqueue(db, "test.recorded_sleep", args={"dsn": dsn, "seconds": 5, "chunks": 50}, queue=queue,
                         lock_key=f"k{i}") for i in range(3)]
    async with app.running(queues=[Queue(queue, 4)], reaper=False) as manager:
        async def one_running() -> bool:
            return await db.fetchval("SELECT count(*) FROM dl_jobs WHERE job_id = ANY($1) AND status = 'running'",
                                     ids) == 1
        await wait_until(one_running, timeout=10, message="one job runs")
        state = {q.queue: q for q in await app.queues()}[queue]
        assert (state.running, state.queued, state.held_back["concurrency"]) == (1, 2, 2)
        await app.configure_queue(queue, concurrency=None)  # the change's NOTIFY wakes the held jobs

        async def all_running() -> bool:
            return await db.fetchval("SELECT count(*) FROM dl_jobs WHERE job_id = ANY($1) AND status = 'running'",
                                     ids) == 3
        await wait_until(all_running, timeout=5, message="the jobs held back start once the limit is cleared")
        for job_id in ids:
            await app.cancel(job_id)
        del manager


async def test_a_finished_job_frees_its_slot_without_waiting_for_a_poll(app, db, dsn):
    """The fallback poll is 30 s here: the jobs behind the limit start when the slot frees."""
    queue = f"wake-{uuid.uuid4().hex[:8]}"
    await app.configure_queue(queue, concurrency=1)
    ids = [await enqueue(db, "test.recorded_sleep", args={"dsn": dsn, "seconds": 0.1, "chunks": 1}, queue=queue,
                         lock_key=f"k{i}") for i in range(5)]
    async with app.running(queues=[Queue(queue, 2)], reaper=False):
        await drain(db, ids, 10)


async def test_hand_written_start_records_with_extreme_times_break_nothing(app, db, dsn):
    """Promise 9 for dl_flow_starts: times the column can hold (±infinity, the far ends of the range)
    are no start in any window: the claim, the listing and the metrics go on."""
    queue = f"odd-{uuid.uuid4().hex[:8]}"
    await app.configure_queue(queue, rate_limit=2, rate_period_sec=1, partition_rate_limit=1,
                              partition_rate_period_sec=1)
    for extreme in ("-infinity", "infinity", "294276-12-31 23:59:59+00", "4713-01-01 00:00:00+00 BC"):
        await db.execute("INSERT INTO dl_flow_starts (queue, partition_key, job_id, started_at) "
                         "VALUES ($1, 'p', gen_random_uuid(), $2::text::timestamptz)", queue, extreme)
    ids = [await enqueue(db, "test.recorded_sleep", args={"dsn": dsn, "seconds": 0.01, "chunks": 1}, queue=queue,
                         lock_key=f"k{i}", partition_key=f"p{i}") for i in range(3)]
    async with app.running(queues=[Queue(queue, 4)], reaper=False):
        await drain(db, ids, 20)
    state = {q.queue: q for q in await app.queues()}[queue]
    assert state.settings.rate_limit == 2 and state.held_back["rate"] == 0
    await app.flow.refresh_metrics()


async def test_a_limit_set_while_the_workers_run_holds_from_then_on(app, db, dsn):
    """The worker claims with the plain statement while the queue has no limit; the limit set at
    run time holds for its next claim (the plain claim leaves a limited queue out), and it claims
    through the gate from then on."""
    queue = f"live-{uuid.uuid4().hex[:8]}"
    first = [await enqueue(db, "test.recorded_sleep", args={"dsn": dsn, "seconds": 0.05, "chunks": 1}, queue=queue,
                           lock_key=f"a{i}") for i in range(4)]
    async with app.running(queues=[Queue(queue, 6)], reaper=False):
        await drain(db, first, 20)
        await app.configure_queue(queue, concurrency=2)
        later = [await enqueue(db, "test.recorded_sleep", args={"dsn": dsn, "seconds": 0.3, "chunks": 3},
                               queue=queue, lock_key=f"b{i}") for i in range(8)]
        await drain(db, later, 30)
    runs = await runs_of(db, later)
    assert max_overlap([(r["started_at"], r["ended_at"]) for r in runs]) == 2


async def test_the_limit_metrics_read_the_database(app, db):
    from prometheus_client import generate_latest

    queue = f"metrics-{uuid.uuid4().hex[:8]}"
    await app.configure_queue(queue, concurrency=5, partition_rate_limit=3)
    await enqueue(db, "dl.noop", queue=queue)
    await app.flow.refresh_metrics()
    text = generate_latest().decode()
    assert f'dl_flow_limit{{limit="concurrency",queue="{queue}"}} 5.0' in text
    assert f'dl_flow_limit{{limit="partition_rate",queue="{queue}"}} 3.0' in text
    assert f'dl_flow_in_use{{limit="concurrency",queue="{queue}"}} 0.0' in text
    assert f'dl_flow_held_back_jobs{{limit="concurrency",queue="{queue}"}} 0.0' in text
    await app.configure_queue(queue, concurrency=None, partition_rate_limit=None)
    await app.flow.refresh_metrics()
    assert f'queue="{queue}"' not in generate_latest().decode().split("dl_flow_limit", 1)[1].split("# HELP", 1)[0]
