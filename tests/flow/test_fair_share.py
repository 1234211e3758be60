"""Fair share across partition keys (issue 21 part B, docs/flow-control.md "Fair share"), at the claim
statement: a fair queue's claims go round-robin (or by weight) across its tenants instead of by age,
while every other rule of the claim holds (pause, a running lock_key, priority within a tenant, the
'picked' journal rows), and a queue that is not fair is claimed exactly as before. The bounds are
asserted in claims (rounds), never in time."""

from __future__ import annotations

import uuid
from collections import Counter

import asyncpg
import pytest

from dataloader import App, Settings
from dataloader.exceptions import ValidationFailed
from dataloader.storage.queue_connection import QueueConnection


async def add_jobs(db: asyncpg.Pool, queue: str, tenant: str, n: int, *, age_sec: float, priority: int = 100,
                   lock_key: str | None = None) -> list[uuid.UUID]:
    """`n` runnable jobs of one tenant, 1 ms apart, the first `age_sec` old (older = claimed first by age)."""
    rows = await db.fetch(
        "INSERT INTO dl_jobs (job_id, queue, task, lock_key, partition_key, priority, created_at, available_at) "
        "SELECT gen_random_uuid(), $1, 'dl.noop', COALESCE($5, gen_random_uuid()::text), $2, $6, "
        "now() - make_interval(secs => $3) + g * interval '1 ms', "
        "now() - make_interval(secs => $3) + g * interval '1 ms' FROM generate_series(1, $4) g RETURNING job_id",
        queue, tenant, age_sec, n, lock_key, priority)
    return [r["job_id"] for r in rows]


@pytest.fixture
async def app(dsn, db):
    app = await App(Settings(db_dsn=dsn, workers=[])).open()
    yield app
    await app.close()


async def claim(db: asyncpg.Pool, queue: str, limit: int, fair: bool = True) -> list[str]:
    """One claim statement in its own transaction; the tenants of the jobs it claimed, in its order."""
    async with db.acquire() as conn:
        batch = await QueueConnection(conn).claim(queue, "test", limit, fair=fair)
        await conn.execute("SELECT pg_advisory_unlock_all()")
    return [j.partition_key for j in batch.claimed]


async def test_a_hot_tenant_does_not_hold_back_the_first_job_of_the_others(app, db):
    queue = f"fair-{uuid.uuid4().hex[:8]}"
    await add_jobs(db, queue, "hot", 2000, age_sec=3600)
    small = [f"t{i:02}" for i in range(20)]
    for i, tenant in enumerate(small):
        await add_jobs(db, queue, tenant, 10, age_sec=60 - i)

    # Not fair: the default claim takes the hot backlog by age.
    async with db.acquire() as conn:
        by_age = await QueueConnection(conn).claim(queue, "test", 16)
        await conn.execute("SELECT pg_advisory_unlock_all()")
    assert {j.partition_key for j in by_age.claimed} == {"hot"}

    flow = await app.configure_queue(queue, fair_share=True)
    assert flow.settings.fair_share and flow.settings.fair_weights is None
    # The default claim now leaves the queue to the fair one (one probe it already made for pause).
    assert await claim(db, queue, 16, fair=False) == []
    async with db.acquire() as conn:
        assert (await QueueConnection(conn).next_due(queue)).fair is True

    # 21 tenants, 16 per claim: every tenant has started a job within ceil(21 / 16) = 2 claims,
    # each claim takes at most one job per tenant while others wait, and the second claim starts
    # with the tenants the first did not serve.
    first = await claim(db, queue, 16)
    second = await claim(db, queue, 16)
    assert len(first) == len(set(first)) == 16 and len(second) == len(set(second)) == 16
    assert set(first) | set(second) == {"hot", *small}
    assert set(second[:5]) == {"hot", *small} - set(first)
    # Over a run, the starts per tenant stay within one of each other (round-robin).
    starts = Counter(first + second)
    for _ in range(8):
        starts.update(await claim(db, queue, 16))
    assert max(starts.values()) - min(starts.values()) <= 1, starts


async def test_weights_share_a_batch_and_priority_orders_a_tenant(app, db):
    queue = f"fair-{uuid.uuid4().hex[:8]}"
    await add_jobs(db, queue, "a", 50, age_sec=100)
    await add_jobs(db, queue, "b", 50, age_sec=200)
    urgent = await add_jobs(db, queue, "a", 1, age_sec=1, priority=0)
    await app.configure_queue(queue, fair_share=True, fair_weights={"a": 3})
    claimed = Counter()
    ids = []
    for _ in range(4):
        async with db.acquire() as conn:
            batch = await QueueConnection(conn).claim(queue, "test", 8, fair=True)
            await conn.execute("SELECT pg_advisory_unlock_all()")
        ids += [j.job_id for j in batch.claimed]
        claimed.update(j.partition_key for j in batch.claimed)
    assert claimed == {"a": 24, "b": 8}
    assert ids[0] == urgent[0]  # a's priority-0 job first in its tenant, though the newest


async def test_every_other_rule_of_the_claim_holds(app, db):
    queue = f"fair-{uuid.uuid4().hex[:8]}"
    held = await add_jobs(db, queue, "a", 1, age_sec=100, lock_key=f"{queue}-k")
    await add_jobs(db, queue, "b", 1, age_sec=50, lock_key=f"{queue}-k")
    await db.execute("UPDATE dl_jobs SET status = 'running' WHERE job_id = $1", held[0])
    await app.configure_queue(queue, fair_share=True)
    assert await claim(db, queue, 4) == []  # b's key runs (a's job): not a candidate
    await db.execute("UPDATE dl_jobs SET status = 'succeeded', finished_at = now() WHERE job_id = $1", held[0])
    await add_jobs(db, queue, "c", 2, age_sec=10, lock_key=f"{queue}-k2")

    await app.pause_queue(queue)
    assert await claim(db, queue, 4) == []
    async with db.acquire() as conn:
        assert (await QueueConnection(conn).next_due(queue)).fair is True  # still fair: no switch
    await app.resume_queue(queue)

    # c's two jobs share a key: one asks for the lock, the other stays queued untouched.
    async with db.acquire() as conn:
        batch = await QueueConnection(conn).claim(queue, "test", 4, fair=True)
        await conn.execute("SELECT pg_advisory_unlock_all()")
    assert sorted(j.partition_key for j in batch.claimed) == ["b", "c"]
    assert [s.lock_busy for s in batch.skipped] == [False]
    picked = await db.fetch("SELECT e.kind, e.payload->>'attempt' AS attempt FROM dl_job_events e "
                            "WHERE e.job_id = ANY($1::uuid[])", [j.job_id for j in batch.claimed])
    assert sorted((r["kind"], r["attempt"]) for r in picked) == [("picked", "1"), ("picked", "1")]

    # Switched off: the fair claim finds nothing, the worker is told to go back to the default one.
    await add_jobs(db, queue, "d", 1, age_sec=5)
    await app.configure_queue(queue, fair_share=False)
    assert await claim(db, queue, 4) == []
    async with db.acquire() as conn:
        assert (await QueueConnection(conn).next_due(queue)).fair is False
    assert await claim(db, queue, 4, fair=False) == ["d"]  # c's other job waits behind its running key


async def test_odd_stored_weights_never_break_the_claim(app, db):
    # (`$2::text::jsonb`: the pool's jsonb codec would store a str parameter as one JSON string,
    # a row with no weights at all, which is what this test read until the text cast was added)
    queue = f"fair-{uuid.uuid4().hex[:8]}"
    for tenant in ("s", "n", "z", "h", "x"):
        await add_jobs(db, queue, tenant, 3, age_sec=10)
    await app.configure_queue(queue, fair_share=True)
    await db.execute("UPDATE dl_queue_flow SET fair_weights = $2::text::jsonb WHERE queue = $1", queue,
                     '{"s": "heavy", "n": -2, "z": 0, "h": 1e400, "x": null}')
    assert Counter(await claim(db, queue, 10)) == {t: 2 for t in ("s", "n", "z", "h", "x")}
    await db.execute("UPDATE dl_queue_flow SET fair_weights = '[1, 2]'::jsonb WHERE queue = $1", queue)
    assert len(await claim(db, queue, 5)) == 5
    assert {q.queue: q.settings.fair_weights for q in await app.queues()}[queue] is None


@pytest.mark.parametrize("weight", ["1e-320", "1e-300", "0.0000001", "5e-324"])
async def test_a_stored_weight_below_the_range_never_breaks_the_claim(app, db, weight):
    """A weight the claim's arithmetic cannot carry (1e-320 underflowed its division: every claim
    of the queue failed with "value out of range: underflow") reads as 1, as one above the range
    does: the claim clamps what it reads to WEIGHT_MIN..WEIGHT_MAX (model/flow.py)."""
    queue = f"fair-{uuid.uuid4().hex[:8]}"
    for tenant in ("t", "u"):
        await add_jobs(db, queue, tenant, 3, age_sec=10)
    await app.configure_queue(queue, fair_share=True)
    await db.execute("UPDATE dl_queue_flow SET fair_weights = $2::text::jsonb WHERE queue = $1", queue,
                     f'{{"t": {weight}, "u": 1.0}}')
    assert Counter(await claim(db, queue, 4)) == {"t": 2, "u": 2}
    assert {q.queue: q.settings.fair_weights for q in await app.queues()}[queue] == {"u": 1.0}


@pytest.mark.parametrize("fields, problem", [
    ({"fair_share": "yes"}, "fair_share: must be true or false"),
    ({"fair_weights": [1]}, "fair_weights: must be an object"),
    ({"fair_weights": {"a": 0}}, "fair_weights: the weight of 'a' must be a number in [0.001, 1e+06]"),
    ({"fair_weights": {"a": 1e-320}}, "fair_weights: the weight of 'a' must be a number in [0.001, 1e+06]"),
    ({"fair_weights": {"a": 0.0009}}, "fair_weights: the weight of 'a' must be a number in [0.001, 1e+06]"),
    ({"fair_weights": {"a": 1e6 + 1}}, "fair_weights: the weight of 'a' must be a number in [0.001, 1e+06]"),
    ({"fair_weights": {"a": float("nan")}}, "fair_weights: the weight of 'a'"),
    ({"fair_weights": {"a": True}}, "fair_weights: the weight of 'a'"),
    ({"fair_weights": {"a" * 201: 1}}, "fair_weights: a partition key must be"),
])
async def test_bad_fair_share_settings_are_refused_and_write_nothing(app, db, fields, problem):
    queue = f"fair-{uuid.uuid4().hex[:8]}"
    with pytest.raises(ValidationFailed) as err:
        await app.configure_queue(queue, **fields)
    assert str(err.value).startswith(problem)
    assert await db.fetchval("SELECT count(*) FROM dl_queue_flow WHERE queue = $1", queue) == 0


async def test_a_paused_task_starts_nothing_in_a_fair_queue_either(app, db):
    queue = f"fair-{uuid.uuid4().hex[:8]}"
    await add_jobs(db, queue, "a", 3, age_sec=10)
    await app.configure_queue(queue, fair_share=True)
    await app.pause_queue(queue, task="dl.noop")
    assert await claim(db, queue, 4) == []
    await app.resume_queue(queue, task="dl.noop")
    assert await claim(db, queue, 4) == ["a", "a", "a"]


async def test_the_queue_limits_hold_in_a_fair_queue(app, db):
    """flow-limits' limits compose: the fair claim reads the queue's row and calls the same gate."""
    queue = f"fair-{uuid.uuid4().hex[:8]}"
    for tenant in ("a", "b", "c"):
        await add_jobs(db, queue, tenant, 5, age_sec=10)
    await app.configure_queue(queue, fair_share=True, partition_concurrency=1)
    first = await claim(db, queue, 8)
    assert sorted(first) == ["a", "b", "c"]  # one running per partition key
    assert await claim(db, queue, 8) == []  # every key at its limit: passed over, nothing starts
    await db.execute("UPDATE dl_jobs SET status = 'succeeded', finished_at = now() "
                     "WHERE queue = $1 AND status = 'running' AND partition_key = 'b'", queue)
    await app.configure_queue(queue, partition_concurrency=None, concurrency=4)
    assert len(await claim(db, queue, 8)) == 2  # 2 still run: 2 slots of 4 left
    assert await claim(db, queue, 8) == []


async def test_a_running_worker_switches_to_the_fair_claim_when_the_queue_turns_fair(app, dsn, db):
    """The worker learns it from the database (an empty default claim, then next_due_in.sql), with no
    restart: after the change commits, every small tenant starts within a bound counted in starts."""
    from tests.conftest import wait_until
    from tests.support.engine import running_engine

    queue = f"fair-{uuid.uuid4().hex[:8]}"
    await add_jobs(db, queue, "hot", 400, age_sec=3600)
    small = ["s0", "s1", "s2"]
    for tenant in small:
        await add_jobs(db, queue, tenant, 3, age_sec=60)

    async def picked() -> list[tuple[int, str]]:
        rows = await db.fetch("SELECT e.event_id, j.partition_key FROM dl_job_events e JOIN dl_jobs j USING (job_id) "
                              "WHERE e.queue = $1 AND e.kind = 'picked' ORDER BY e.event_id", queue)
        return [(r["event_id"], r["partition_key"]) for r in rows]

    # Jobs claimed ahead before the switch (DL_CLAIM_AHEAD, docs/architecture.md) may still start by
    # age: at most that many more, so the bound below counts them.
    claim_ahead = 4
    async with running_engine(dsn, db, {queue: 2}, claim_ahead=claim_ahead):
        async def some_hot_started() -> bool:
            return len(await picked()) >= 20
        await wait_until(some_hot_started, message="the hot backlog starts by age")
        assert {t for _, t in await picked()} == {"hot"}
        await app.configure_queue(queue, fair_share=True)
        mark = (await picked())[-1][0]

        async def small_done() -> bool:
            return await db.fetchval("SELECT count(*) FROM dl_jobs WHERE queue = $1 AND partition_key <> 'hot' "
                                     "AND status = 'succeeded'", queue) == 9
        await wait_until(small_done, timeout=30, message="the small tenants run")
    after = [t for event_id, t in await picked() if event_id > mark]
    first = {t: after.index(t) for t in small}
    # claims already running at the commit may start by age (at most a batch of 2 each, and the jobs
    # claimed ahead); then the fair claim takes the 4 tenants round-robin: each small tenant within
    # 2 x 4 + 2 + claim_ahead starts
    assert max(first.values()) < 10 + claim_ahead, (first, after[:12])
