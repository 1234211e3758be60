"""A queue's concurrency limit through the faults that take a slot back from its holder
(docs/flow-control.md, "What a limit promises when a holder is frozen, cut off or restarted").

The gate counts `running` rows. A slot is free again once the reaper requeued its job: the lease ran
out, so the row says the attempt is over. Whether the old holder's *code* is over too depends on
whether it could stop itself:

- a worker cut off from the database stops an async attempt itself before its lease can run out
  (workers/lease_guard.py), so the slot is handed out only after the old run stopped;
- a worker frozen with SIGSTOP cannot: the slot goes to another job while the frozen handler is
  still on its stack; when it is resumed it learns at once that its lease is gone and stops at its
  next await, its writes refused (fencing). These tests measure how much it ran meanwhile;
- a sync function in a thread cannot be interrupted: asked to stop (lease lost) it runs on unless it
  polls `ctx.stop_requested`, while its slot is handed to another job;
- a PostgreSQL restart loses nothing the gate counts (running rows, recorded starts).

Every run is read from what the pipelines recorded themselves (rows on their own connection, or
lines of a file for a sync function) and from the journal (tests/chaos/limits.py)."""

from __future__ import annotations

import asyncio
import json
import signal
import time
import uuid
from pathlib import Path

import pytest

from tests.chaos.limits import check_limits, limits_reached
from tests.conftest import wait_until
from tests.support.engine import enqueue
from tests.support.pipelines import PROBE_DDL
from tests.support.wire import CountingProxy

MODULES = "tests.support.pipelines,tests.support.fencing_pipelines"
FAST = {"heartbeat_sec": 0.2, "reaper_period_sec": 0.2, "claim_backoff_sec": 0.2, "pipeline_modules": MODULES}


def _limits(queue: str, **limits: object) -> dict[str, str]:
    return {"queues_json": json.dumps({queue: limits})}


async def _journal_limits(db, queue: str, **limits) -> dict:
    """The limits replayed from the journal; a rate by the gate's own stamps of the starts (the test
    is shorter than the minute dl_flow_starts keeps them)."""
    events = await db.fetch("SELECT job_id::text, event_id, kind, ts FROM dl_job_events WHERE queue = $1 "
                            "AND kind <> 'heartbeat'", queue)
    parts = {r["job_id"]: r["partition_key"] for r in
             await db.fetch("SELECT job_id::text, partition_key FROM dl_jobs WHERE queue = $1", queue)}
    stamps: dict[str, list] = {}
    if limits.get("rate_limit"):
        for r in await db.fetch("SELECT job_id::text, started_at FROM dl_flow_starts WHERE queue = $1", queue):
            stamps.setdefault(r["job_id"], []).append(r["started_at"])
    return check_limits([dict(e) for e in events], parts, **limits,
                        gate_starts=stamps if limits.get("rate_limit") else None)


async def _probe_rows(db, job_id, attempt: int | None = None):
    rows = await db.fetch("SELECT attempt, pid, chunk, note, at, began FROM test_probe WHERE job_id = $1 ORDER BY id",
                          job_id)
    return [r for r in rows if attempt is None or r["attempt"] == attempt]


async def test_a_holder_frozen_past_its_lease_loses_its_slot_and_stops_at_once_when_resumed(dsn, db, workers):
    """Concurrency 1. The holder of the slot is frozen (SIGSTOP) in the middle of its job; its lease
    runs out, the other worker's reaper requeues the job and the slot goes to the next job, which runs
    while the frozen handler is still on its stack (frozen: it runs nothing). Then SIGCONT: the woken
    attempt is stopped at once (its lease guard's time is long past, and its heartbeat is refused),
    so its handler runs on next to the new holder only until its next await, and none of its writes
    is applied. The journal never shows two running."""
    await db.execute(PROBE_DDL)
    queue = f"frozen-{uuid.uuid4().hex[:6]}"
    pair = [workers(queues={queue: 2}, **FAST, **_limits(queue, concurrency=1)) for _ in range(2)]
    for w in pair:
        await w.wait_ready()
    # the holder: 400 chunks of 50 ms (20 s if never stopped), a 2 s lease; the next job has its
    # own lock_key, so only the limit holds it back
    holder = await enqueue(db, "test.probed_chunks", queue=queue, lease_ttl_sec=2,
                           args={"dsn": dsn, "chunks": 400, "chunk_sec": 0.05})
    pid = await wait_until(lambda: db.fetchval("SELECT pid FROM test_probe WHERE job_id = $1 AND chunk >= 1 "
                                               "LIMIT 1", holder), timeout=20, message="the holder to run")
    nxt = await enqueue(db, "test.probed_chunks", queue=queue, lease_ttl_sec=10,
                        args={"dsn": dsn, "chunks": 40, "chunk_sec": 0.05})
    frozen = next(w for w in pair if w.pid == pid)
    other = next(w for w in pair if w.pid != pid)
    await asyncio.sleep(0.5)
    assert await _probe_rows(db, nxt) == [], "the limit of 1 let the next job start beside the holder"
    frozen.signal(signal.SIGSTOP)
    try:
        await wait_until(lambda: db.fetchval("SELECT count(*) FROM dl_job_events WHERE job_id = $1 AND kind = "
                                             "'requeue' AND payload->>'reason' = 'lease_expired'", holder),
                         timeout=20, message="the reaper to take the frozen holder's job back")
        await wait_until(lambda: _probe_rows(db, nxt), timeout=20, message="the slot to go to the next job")
        await asyncio.sleep(0.3)  # the new holder well in its run
        resumed_at = await db.fetchval("SELECT clock_timestamp()")
    finally:
        frozen.signal(signal.SIGCONT)
    await wait_until(lambda: db.fetchval("SELECT count(*) FROM test_probe WHERE job_id = $1 AND attempt = 1 "
                                         "AND chunk IS NULL", holder), timeout=10,
                     message="the woken holder to stop")
    await wait_until(lambda: db.fetchval("SELECT count(*) = 2 FROM dl_jobs WHERE job_id = ANY($1) AND "
                                         "status = 'succeeded'", [holder, nxt]), timeout=40,
                     message="both jobs to succeed")
    old = await _probe_rows(db, holder, 1)
    new = await _probe_rows(db, nxt, 1)
    assert {r["pid"] for r in new} == {other.pid}
    woken = [r for r in old if r["at"] > resumed_at]
    stopped_after = (old[-1]["at"] - resumed_at).total_seconds()
    # begun by the handler after the resume (a chunk it began just before the SIGSTOP reaches the
    # server only after the SIGCONT: its `at` is late, its `began` is not)
    ran_with_new = [r for r in woken if r["chunk"] is not None and r["began"] > resumed_at]
    print(f"frozen holder after SIGCONT: {len(ran_with_new)} chunk(s) begun, stopped {stopped_after * 1000:.0f} ms "
          f"after the resume, while the new holder ran {new[0]['at']} .. {new[-1]['at']}")
    # what the slot's two holders did at once: the frozen one ran nothing until the resume, then
    # stopped at its next await (no chunk begun after the resume) within a fraction of a second
    assert old[-1]["note"].startswith("stopped"), old[-1]
    assert ran_with_new == [], f"the woken holder began chunks beside the new one: {ran_with_new}"
    assert stopped_after < 1.0, f"the woken holder ran {stopped_after:.2f} s beside the new holder"
    assert new[0]["at"] < resumed_at < new[-1]["at"], "the resume did not fall in the new holder's run"
    # every write of the woken attempt was refused; the journal never shows two running
    late = await db.fetch("SELECT kind FROM dl_job_events WHERE job_id = $1 AND (payload->>'attempt')::int = 1 "
                          "AND ts > $2 AND kind <> 'requeue'", holder, resumed_at)
    assert late == [], f"writes of the fenced attempt applied: {late}"
    found = await _journal_limits(db, queue, concurrency=1, partition_concurrency=None, rate_limit=None,
                                  rate_period_sec=None)
    assert not any(found["checks"].values()), found
    assert found["counts"]["most_running"] == 1


@pytest.mark.parametrize("poll", [True, False], ids=["polls-the-stop", "ignores-the-stop"])
async def test_a_sync_function_cut_off_from_the_database_keeps_its_slot_only_if_it_polls_the_stop(
        dsn, db, workers, tmp_path: Path, poll: bool):
    """Concurrency 1, the holder a sync function (a thread) whose worker is silently cut off from the
    database (tests/support/wire.py). Its lease guard asks it to stop before the lease can run out
    (lease_lost). Polling `ctx.stop_requested`, it returns at once, before the reaper hands its slot
    to the next job: no overlap. Ignoring it, it cannot be interrupted: it runs on in its thread,
    next to the next job that got its slot."""
    port = int(await db.fetchval("SHOW port"))
    queue = f"sync-{uuid.uuid4().hex[:6]}"
    path = tmp_path / "runs.txt"
    path.touch()
    path.chmod(0o666)
    async with CountingProxy(dsn, port) as link:
        cut = workers(queues={queue: 2}, db_dsn=link.dsn, **FAST, **_limits(queue, concurrency=1))
        await cut.wait_ready()
        holder = await enqueue(db, "test.sync_file_chunks", queue=queue, lease_ttl_sec=2,
                               args={"path": str(path), "chunks": 300, "chunk_sec": 0.1, "poll": poll})
        await wait_until(lambda: _lines(path, "chunk"), timeout=20, message="the holder to run")
        nxt = await enqueue(db, "test.sync_file_chunks", queue=queue, lease_ttl_sec=10,
                            args={"path": str(path), "chunks": 20, "chunk_sec": 0.1})
        other = workers(queues={queue: 2}, **FAST, **_limits(queue, concurrency=1))
        await other.wait_ready()
        link.partition()
        try:
            await wait_until(lambda: any(r[1] == str(nxt) for r in _lines(path, "start")), timeout=30,
                             message="the slot to go to the next job")
            await wait_until(lambda: any(r[1] == str(nxt) for r in _lines(path, "end")), timeout=30,
                             message="the next job to end")
        finally:
            link.heal()
    runs = _lines(path)
    old = [r for r in runs if r[1] == str(holder) and r[2] == "1"]
    new = [r for r in runs if r[1] == str(nxt)]
    new_start, new_end = float(new[0][4]), float(new[-1][4])
    beside = [r for r in old if r[0] == "chunk" and new_start <= float(r[4]) <= new_end]
    old_last = float(old[-1][4])
    print(f"sync holder ({'polls' if poll else 'ignores'} the stop): last line {old[-1][0]} "
          f"{old_last - new_start:+.2f} s from the next job's start; {len(beside)} chunk(s) beside it")
    if poll:
        assert old[-1][0] == "stopped" and old[-1][5] == "lease_lost", old[-1]
        assert old_last < new_start, "the polling sync holder was still running when its slot was handed out"
        assert beside == []
    else:
        # honest: the thread cannot be stopped; it runs on beside the job that took its slot
        assert old[-1][0] in ("chunk", "end")
        assert len(beside) >= 5, f"expected the ignoring sync holder to run beside the next job: {old[-3:]}"


def _lines(path: Path, kind: str | None = None) -> list[list[str]]:
    return [line.split() for line in path.read_text().splitlines() if kind is None or line.startswith(kind + " ")]


@pytest.mark.timeout(180)
@pytest.mark.exclusive(when="shared_server")  # restarts PostgreSQL: alone when the workers share one
async def test_the_limits_hold_through_a_real_postgres_restart(dsn, db, workers, restart):
    """Concurrency 2 and 4 starts per second on a queue two workers serve with 4 slots each; PostgreSQL
    is restarted (for real: the `restart` fixture) while jobs run and wait. From the journal: never
    more than 2 running, never more than 4 starts in a second, across the restart, and both limits
    reached after it (the gate's counts are rows: a restart loses none, so no burst)."""
    queue = f"restart-{uuid.uuid4().hex[:6]}"
    pair = [workers(queues={queue: 4}, **FAST, **_limits(queue, concurrency=2, rate="4/1s")) for _ in range(2)]
    for w in pair:
        await w.wait_ready()
    jobs = [await enqueue(db, "test.async_sleep", queue=queue, lease_ttl_sec=5, lock_key=f"k{i}",
                          args={"seconds": 0.3}) for i in range(24)]
    await wait_until(lambda: db.fetchval("SELECT count(*) >= 6 FROM dl_jobs WHERE job_id = ANY($1) AND "
                                         "status = 'succeeded'", jobs), timeout=30, message="6 jobs to finish")
    restarted_at = time.time()
    how = await restart()
    assert how == "restarted"
    await wait_until(lambda: db.fetchval("SELECT count(*) = $2 FROM dl_jobs WHERE job_id = ANY($1) AND "
                                         "status = 'succeeded'", jobs, len(jobs)), timeout=90,
                     message="every job to succeed after the restart")
    found = await _journal_limits(db, queue, concurrency=2, partition_concurrency=None, rate_limit=4,
                                  rate_period_sec=1.0)
    print(found["counts"])
    assert not any(found["checks"].values()), found
    assert all(limits_reached(found["counts"]).values()), found["counts"]
    after = await _journal_limits_after(db, queue, restarted_at)
    assert after["counts"]["most_running"] == 2 and after["counts"]["most_starts_in_a_window"] == 4, after["counts"]
    for w in pair:
        assert w.proc is not None and w.proc.poll() is None, "a worker died with the restart"


async def _journal_limits_after(db, queue: str, since: float) -> dict:
    events = await db.fetch("SELECT job_id::text, event_id, kind, ts FROM dl_job_events WHERE queue = $1 "
                            "AND kind <> 'heartbeat' AND ts > to_timestamp($2)", queue, since)
    stamps: dict[str, list] = {}
    for r in await db.fetch("SELECT job_id::text, started_at FROM dl_flow_starts WHERE queue = $1", queue):
        stamps.setdefault(r["job_id"], []).append(r["started_at"])
    return check_limits([dict(e) for e in events], {}, concurrency=2, partition_concurrency=None, rate_limit=4,
                        rate_period_sec=1.0, gate_starts=stamps)
