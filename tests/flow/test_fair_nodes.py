"""Fair share and a task's pause on real node processes (issue 21 part B): two `dataloader worker`
processes race for one queue.

- Fair share: a hot tenant's backlog, enqueued first, does not hold back the other tenants: each
  small tenant's first job is among the first 2 x T claims (T tenants), counted in the order the
  claims journaled their 'picked' rows, where by age it would come after the whole hot backlog.
  The bound is in claims, not in time: 2 x T allows each node one round claimed on a stale view of
  the other's (their claims race), on top of the T of a strict round-robin.
- A paused task starts nothing on either node while the queue's other task runs, and its backlog
  runs once it is resumed. "The nodes tried" is observed: the claim statements themselves are
  counted (calls of dl_claim_fence, as in test_pause_nodes.py) before the still-queued jobs are
  checked."""

from __future__ import annotations

import uuid

import asyncpg

from dataloader import App, Settings
from tests.conftest import wait_until
from tests.flow.test_fair_share import add_jobs
from tests.flow.test_pause_nodes import claims_made, still_held, wait_for_claims
from tests.support.engine import enqueue


async def done(pool: asyncpg.Pool, queue: str, count: int) -> bool:
    return await pool.fetchval("SELECT count(*) FROM dl_jobs WHERE queue = $1 AND status = 'succeeded'",
                               queue) == count


async def test_a_hot_tenant_does_not_starve_the_small_ones_on_two_nodes(dsn, db, workers):
    queue = f"fair-{uuid.uuid4().hex[:8]}"
    app = await App(Settings(db_dsn=dsn, workers=[])).open()
    try:
        await app.configure_queue(queue, fair_share=True)
        await add_jobs(db, queue, "hot", 400, age_sec=3600)
        small = [f"t{i}" for i in range(10)]
        for i, tenant in enumerate(small):
            await add_jobs(db, queue, tenant, 5, age_sec=60 - i)
        nodes = [workers(queues={queue: 4}), workers(queues={queue: 4})]
        for node in nodes:
            await node.wait_ready()
        await wait_until(lambda: done(db, queue, 450), timeout=60, interval=0.1, message="the queue drains")

        order = await db.fetch(
            "SELECT j.partition_key FROM dl_job_events e JOIN dl_jobs j USING (job_id) "
            "WHERE e.queue = $1 AND e.kind = 'picked' ORDER BY e.event_id", queue)
        tenants = [r["partition_key"] for r in order]
        assert len(tenants) == 450  # every job started once: none lost, none run twice
        first_start = {t: tenants.index(t) for t in small}
        bound = 2 * (len(small) + 1)
        assert max(first_start.values()) < bound, (first_start, tenants[:bound])
        # while the small tenants had work, the hot one took about its share of the starts
        assert tenants[:bound].count("hot") <= 4, tenants[:bound]
    finally:
        await app.close()


async def test_weights_hold_across_two_nodes(dsn, db, workers):
    """Weights are shared state too: two nodes claiming a queue whose tenant `a` weighs 3 and `b`
    weighs 1 start about three of a's jobs for each of b's while both have a backlog, counted over
    both nodes' starts in the order their claims journaled them. With the weights ignored by the
    claim (every tenant weighing 1), a's share of those starts is a half and this fails."""
    queue = f"fair-{uuid.uuid4().hex[:8]}"
    app = await App(Settings(db_dsn=dsn, workers=[])).open()
    try:
        await app.configure_queue(queue, fair_share=True, fair_weights={"a": 3})
        # Paused until both nodes are up: a node that started first could drain the queue alone.
        await app.pause_queue(queue)
        await add_jobs(db, queue, "b", 120, age_sec=3600)  # older: by age, b would go first
        await add_jobs(db, queue, "a", 120, age_sec=60)
        nodes = [workers(queues={queue: 4}), workers(queues={queue: 4})]
        for node in nodes:
            await node.wait_ready()
        await app.resume_queue(queue)
        await wait_until(lambda: done(db, queue, 240), timeout=60, interval=0.1, message="the queue drains")
        picked = await db.fetch(
            "SELECT j.partition_key, e.payload->>'worker' AS worker FROM dl_job_events e JOIN dl_jobs j USING (job_id) "
            "WHERE e.queue = $1 AND e.kind = 'picked' ORDER BY e.event_id", queue)
        assert len(picked) == 240
        assert len({r["worker"] for r in picked}) == 2, "both nodes must have claimed"
        first = [r["partition_key"] for r in picked[:80]]  # both tenants still had a backlog
        assert 52 <= first.count("a") <= 68, first  # 3 : 1 is 60 of 80; equal weights would be 40
    finally:
        await app.close()


async def test_a_paused_task_starts_nothing_on_two_nodes_while_the_other_task_runs(dsn, db, workers, counted_claims):
    queue = f"task-{uuid.uuid4().hex[:8]}"
    app = await App(Settings(db_dsn=dsn, workers=[])).open()
    try:
        await app.pause_queue(queue, task="test.async_sleep")
        nodes = [workers(queues={queue: 2}, poll_fallback_sec=0.5), workers(queues={queue: 2}, poll_fallback_sec=0.5)]
        for node in nodes:
            await node.wait_ready()
        held = [await enqueue(db, "test.async_sleep", queue=queue, args={"seconds": 0.01}) for _ in range(4)]
        # the other task's jobs last 0.3 s each, so one node's 2 slots cannot take all 20 before the
        # other node's claim (a NOTIFY away): both nodes must claim while the paused task waits
        for _ in range(20):
            await enqueue(db, "test.sync_sleep", queue=queue, args={"seconds": 0.3})
        await wait_until(lambda: done(db, queue, 20), timeout=30, interval=0.1, message="the other task runs")
        await wait_for_claims(db, await claims_made(db) + 8)
        await still_held(db, held)
        ran = await db.fetchval("SELECT count(DISTINCT e.payload->>'worker') FROM dl_job_events e "
                                "WHERE e.queue = $1 AND e.kind = 'picked'", queue)
        assert ran == 2  # both nodes claimed (the other task) while the paused one waited

        await app.resume_queue(queue, task="test.async_sleep")
        await wait_until(lambda: done(db, queue, 24), timeout=20, interval=0.1, message="the resumed task runs")
    finally:
        await app.close()
