"""Held jobs (dead letter) with real worker processes: a queue that holds jobs whose attempts ran
out, an error prefix held at once in any queue, and plain failures elsewhere; held jobs listed by
the search, never pruned, and released by filter with a bulk requeue (they then run and succeed)."""

from __future__ import annotations

import json
import time

from tests.conftest import wait_until
from tests.support.engine import enqueue


async def all_ended(db) -> bool:
    return await db.fetchval("SELECT count(*) FROM dl_jobs WHERE status IN ('queued', 'running')") == 0


async def test_held_jobs_are_kept_listed_and_released_by_filter(app_on_db, db, workers):
    until = time.time() + 3600
    exhausted = [await enqueue(db, "test.fail_until", queue="hq", args={"until": until, "message": "flaky"},
                               max_attempts=2) for _ in range(4)]
    named = [await enqueue(db, "test.fail_until", queue="pq", max_attempts=5,
                           args={"until": until, "message": "SchemaMismatch: column x"}) for _ in range(3)]
    plain = [await enqueue(db, "test.fail_until", queue="pq", args={"until": until, "message": "nope"},
                           max_attempts=1) for _ in range(2)]
    w = workers(queues={"hq": 2, "pq": 2}, hold_queues="hq", operations_period_sec=0.2,
                hold_errors_json=json.dumps(["RuntimeError: SchemaMismatch"]))
    await w.wait_ready()
    await wait_until(lambda: all_ended(db), timeout=60, message="every job to end")
    rows = {r["job_id"]: r for r in await db.fetch(
        "SELECT job_id, status::text, attempt, held_at, held_reason FROM dl_jobs")}
    assert {(rows[j]["status"], rows[j]["attempt"], rows[j]["held_reason"]) for j in exhausted} == {
        ("failed", 2, "attempts_exhausted")}
    assert {(rows[j]["status"], rows[j]["attempt"], rows[j]["held_reason"]) for j in named} == {
        ("failed", 1, "held_error")}  # held at once: no retry spent on an error no retry fixes
    assert {(rows[j]["status"], rows[j]["held_at"]) for j in plain} == {("failed", None)}
    # the hold is journaled with the failure, in the finish statement
    journal = await db.fetch("SELECT job_id, payload FROM dl_job_events WHERE kind = 'failed'")
    assert {r["job_id"] for r in journal if r["payload"].get("held")} == set(exhausted) | set(named)

    held = await app_on_db.search({"held": True}, count=True)
    assert held.count == 7 and {j.id for j in held.jobs} == set(exhausted) | set(named)
    report = await app_on_db.prune(older_than=0, statuses=["failed"])
    assert report.to_dict()["total"] == 2  # only the plain failures: held jobs wait for an operator
    assert await db.fetchval("SELECT count(*) FROM dl_jobs WHERE held_at IS NOT NULL") == 7

    # the fix is deployed (here: the jobs no longer fail); release the held jobs of queue hq by
    # filter, discard pq's
    await db.execute("UPDATE dl_jobs SET args = jsonb_set(args, '{until}', '0')")
    release = await app_on_db.operations.start("requeue", {"held": True, "queues": ["hq"]}, started_by="ops")
    discard = await app_on_db.operations.start("delete", {"held": True, "queues": ["pq"]}, started_by="ops")
    for op in (release, discard):
        final = await app_on_db.operations.wait(op.id, timeout=60, interval=0.1)
        assert (final.state, final.changed) == ("finished", final.total)
    await wait_until(lambda: all_ended(db), timeout=60, message="released jobs to run")
    after = {r["job_id"]: r for r in await db.fetch("SELECT job_id, status::text, held_at FROM dl_jobs")}
    assert {(after[j]["status"], after[j]["held_at"]) for j in exhausted} == {("succeeded", None)}
    assert not set(named) & set(after)
