"""Fencing (DESIGN promise 3) with a worker that really stops, not one told at once that it lost:
a worker process is frozen with SIGSTOP in the middle of a job and stays frozen past its lease. The
other worker's reaper takes the job back, that worker claims it (and is held off by the lock_key,
still held by the frozen worker's session). Then SIGCONT: the frozen worker wakes up believing it
still runs attempt 1. Its writes must be refused, it must stop its pipeline and let go of the key,
and the other worker runs attempt 2. What really ran is read from an independent probe (rows the
pipeline writes on a connection of its own, tests/support/pipelines.py `test.probed_chunks`).

The second test cuts one worker off silently instead (its connections go through the proxy of
tests/support/wire.py, which stops forwarding: statements hang, nothing errs, the process runs on),
and heals the link once the job was taken back: the same outcome is required."""

from __future__ import annotations

import signal

from tests.conftest import wait_until
from tests.support.engine import enqueue, job_row
from tests.support.pipelines import PROBE_DDL
from tests.support.wire import CountingProxy

QUEUE = "paused-q"


async def _probe(db, job_id):
    return await db.fetch("SELECT attempt, pid, chunk, note, at FROM test_probe WHERE job_id = $1 ORDER BY id",
                          job_id)


async def _attempt_1_pid(db, job_id) -> int | None:
    return await db.fetchval("SELECT pid FROM test_probe WHERE job_id = $1 AND attempt = 1 AND chunk >= 1 LIMIT 1",
                             job_id)


async def test_a_worker_frozen_past_its_lease_is_fenced_off_when_it_wakes_and_never_overlaps(dsn, db, workers):
    await db.execute(PROBE_DDL)
    fast = {"heartbeat_sec": 0.2, "reaper_period_sec": 0.2, "claim_backoff_sec": 0.2}
    pair = [workers(queues={QUEUE: 1}, **fast), workers(queues={QUEUE: 1}, **fast)]
    for w in pair:
        await w.wait_ready()
    # 400 chunks of 50 ms: 20 s if attempt 1 were never stopped; a 2 s lease
    job_id = await enqueue(db, "test.probed_chunks", queue=QUEUE, lease_ttl_sec=2,
                           args={"dsn": dsn, "chunks": 400, "chunk_sec": 0.05})
    pid = await wait_until(lambda: _attempt_1_pid(db, job_id), timeout=20, message="attempt 1 to run")
    frozen = next(w for w in pair if w.pid == pid)
    other = next(w for w in pair if w.pid != pid)
    frozen.signal(signal.SIGSTOP)
    try:
        await _taken_back_and_held_off(db, job_id)
    finally:
        frozen.signal(signal.SIGCONT)
    await _woken_attempt_fenced_and_no_overlap(db, job_id, frozen, other)


async def test_a_silently_partitioned_worker_is_fenced_off_when_the_link_heals_and_never_overlaps(dsn, db,
                                                                                               workers):
    await db.execute(PROBE_DDL)
    port = int(await db.fetchval("SHOW port"))
    async with CountingProxy(dsn, port) as link:
        fast = {"heartbeat_sec": 0.2, "reaper_period_sec": 0.2, "claim_backoff_sec": 0.2}
        cut = workers(queues={QUEUE: 1}, db_dsn=link.dsn, **fast)
        await cut.wait_ready()
        # the probe's own connection is direct: it shows whether the pipeline runs on while cut off
        job_id = await enqueue(db, "test.probed_chunks", queue=QUEUE, lease_ttl_sec=2,
                               args={"dsn": dsn, "chunks": 400, "chunk_sec": 0.05})
        await wait_until(lambda: _attempt_1_pid(db, job_id), timeout=20, message="attempt 1 to run")
        other = workers(queues={QUEUE: 1}, **fast)
        await other.wait_ready()
        link.partition()
        try:
            await _taken_back_and_held_off(db, job_id, cut_off=True)
        finally:
            link.heal()
        await _woken_attempt_fenced_and_no_overlap(db, job_id, cut, other)


async def _taken_back_and_held_off(db, job_id, *, cut_off: bool = False) -> None:
    """The other worker's reaper takes the job back once the lease really ran out (no faked expiry),
    and its claim is held off: the cut-off worker's session still holds the lock_key. A frozen
    worker runs nothing meanwhile; a cut-off one (`cut_off`) is awake, and its lease guard stops
    attempt 1 by its own clock before the lease could run out, so before the reaper took it back."""
    await wait_until(lambda: db.fetchval("SELECT count(*) FROM dl_job_events WHERE job_id = $1 AND "
                                         "kind = 'requeue' AND payload->>'reason' = 'lease_expired'",
                                         job_id), timeout=20, message="the reaper to take the job back")
    await wait_until(lambda: db.fetchval("SELECT count(*) FROM dl_job_events WHERE job_id = $1 AND "
                                         "kind = 'requeue' AND payload->>'reason' = 'lock_busy'", job_id),
                     timeout=20, message="the other worker to try the job")
    rows = await _probe(db, job_id)
    assert {r["attempt"] for r in rows} == {1}, "attempt 2 ran while attempt 1 was cut off"
    if not cut_off:
        assert all(r["chunk"] is not None for r in rows), "attempt 1 ended while frozen"
        return
    ended = [r for r in rows if r["chunk"] is None]
    assert len(ended) == 1 and ended[0]["note"].startswith("stopped: CancelledError"), rows[-3:]
    reaped_at = await db.fetchval("SELECT min(ts) FROM dl_job_events WHERE job_id = $1 AND kind = 'requeue' "
                                  "AND payload->>'reason' = 'lease_expired'", job_id)
    assert ended[0]["at"] < reaped_at, "attempt 1 ran on after the reaper took its job back"


async def _woken_attempt_fenced_and_no_overlap(db, job_id, stale, other) -> None:
    await wait_until(lambda: _status_is(db, job_id, "succeeded"), timeout=30, message="attempt 2 to succeed")
    rows = await _probe(db, job_id)
    first = [r for r in rows if r["attempt"] == 1]
    second = [r for r in rows if r["attempt"] == 2]
    # attempt 1 stopped its pipeline when it woke (well before its 400 chunks) and said so
    assert first[-1]["chunk"] is None and first[-1]["note"].startswith("stopped"), first[-1]
    assert len(first) - 1 < 400
    assert {r["pid"] for r in first} == {stale.pid}
    # attempt 2 ran on the other worker, whole, and only after attempt 1's last probe row
    assert {r["pid"] for r in second} == {other.pid}
    assert [r["chunk"] for r in second] == [0, 1, 2, None] and second[-1]["note"] == "completed"
    assert second[0]["at"] > first[-1]["at"], "attempt 2 started before the frozen attempt 1 stopped"
    # every write of the woken attempt 1 was refused: nothing of attempt 1 in the journal after the
    # reaper took the job back, the row shows attempt 2's progress and one success, by attempt 2
    row = await job_row(db, job_id)
    assert (row["status"], row["attempt"], row["progress"]) == ("succeeded", 2, {"attempt": 2, "chunk": 2})
    events = await db.fetch("SELECT event_id, kind, payload FROM dl_job_events WHERE job_id = $1 ORDER BY event_id",
                            job_id)
    reaped_at = next(e["event_id"] for e in events if e["kind"] == "requeue")
    late = [(e["kind"], e["payload"]) for e in events if e["event_id"] > reaped_at and
            e["payload"] is not None and e["payload"].get("attempt") == 1 and e["kind"] != "requeue"]
    assert late == [], f"writes of the fenced-off attempt 1 were applied: {late}"
    assert [e["payload"]["attempt"] for e in events if e["kind"] == "done"] == [2]
    assert stale.proc is not None and stale.proc.poll() is None, "the woken worker died instead of going on"


async def _status_is(db, job_id, status):
    return (await job_row(db, job_id))["status"] == status
