"""Chains and stages (issue 10): a job's next stages are enqueued by the statement that finishes it
as succeeded, so they commit with it or not at all; a chain is one id with its stage history."""

from __future__ import annotations

import asyncio
import random
import signal
import uuid

import asyncpg
import httpx
import pytest

from dataloader import App, ChainNotFound, InvalidJobRequest, Stage
from dataloader.api import create_app
from dataloader.testing import drain
from tests.conftest import wait_until
from tests.jobs.conftest import MODULES, settings_for


async def test_a_planned_chain_runs_stage_after_stage_each_fed_the_previous_result(app: App, runs):
    first = await app.enqueue("pattern.step", {"dsn": app.dsn}, queue="q",
                              then=[Stage("pattern.step", {"dsn": app.dsn}), Stage("pattern.step", {"dsn": app.dsn})])
    assert first.chain_id == first.id and first.chain_next is not None

    result = await drain(app, "q", timeout=30)

    assert len(result.succeeded) == 3 and not result.failed
    chain = await app.chain(first.id)
    assert chain.status == "succeeded"
    assert [job.result for job in chain.jobs] == [{"n": 1}, {"n": 2}, {"n": 3}]
    assert [job.parent_job_id for job in chain.jobs] == [None, chain.jobs[0].id, chain.jobs[1].id]
    assert {job.chain_id for job in chain.jobs} == {first.id}
    # any stage's id finds the chain
    assert [j.id for j in (await app.chain(chain.jobs[2].id)).jobs] == [j.id for j in chain.jobs]
    args = await runs.fetch("SELECT args FROM pattern_runs ORDER BY id")
    assert [a["args"].get("input") for a in args] == [None, {"n": 1}, {"n": 2}]
    done = await runs.fetchval("SELECT payload FROM dl_job_events WHERE job_id = $1 AND kind = 'done'", first.id)
    assert done["next_jobs"] == 1


async def test_a_returned_then_fans_out_and_replaces_the_plan(app: App, runs):
    root = await app.enqueue("pattern.fan_out", {"dsn": app.dsn, "parts": 4}, queue="q",
                             then=[Stage("pattern.fail", {"dsn": app.dsn})])

    result = await drain(app, "q", timeout=30)

    assert len(result.succeeded) == 5 and not result.failed  # the planned failing stage never ran
    chain = await app.chain(root.id)
    assert chain.jobs[0].result == {"parts": 4}
    children = chain.jobs[1:]
    assert sorted(job.args is None and job.task for job in children) == ["pattern.step"] * 4
    assert {job.parent_job_id for job in children} == {root.id}
    parts = await runs.fetch("SELECT args->>'part' AS part FROM pattern_runs WHERE task = 'pattern.step'")
    assert sorted(int(r["part"]) for r in parts) == [0, 1, 2, 3]


async def test_a_failed_stage_stops_the_chain(app: App, runs):
    first = await app.enqueue("pattern.step", {"dsn": app.dsn}, queue="q",
                              then=[Stage("pattern.fail", {"dsn": app.dsn}), Stage("pattern.step", {"dsn": app.dsn})])

    await drain(app, "q", timeout=30)

    chain = await app.chain(first.id)
    assert [(job.task, job.status.value) for job in chain.jobs] == [
        ("pattern.step", "succeeded"), ("pattern.fail", "failed")]
    assert chain.status == "failed"
    assert await runs.fetchval("SELECT count(*) FROM pattern_runs WHERE task = 'pattern.step'") == 1


async def test_stages_enqueued_by_ctx_transaction_commit_or_roll_back_with_it(app: App, runs):
    committed = await app.enqueue("pattern.in_transaction", {"dsn": app.dsn}, queue="q")
    rolled_back = await app.enqueue("pattern.in_transaction", {"dsn": app.dsn, "rollback": True}, queue="q",
                                    max_attempts=1)

    result = await drain(app, "q", timeout=30)

    assert {job.id for job in result.failed} == {rolled_back.id}
    chain = await app.chain(committed.id)
    assert [job.task for job in chain.jobs] == ["pattern.in_transaction", "pattern.step"]
    with pytest.raises(ChainNotFound):
        await app.chain(rolled_back.id)
    # the two jobs and the one stage the committed transaction enqueued (counted by lineage, not over
    # the whole table, which an earlier test's lingering worker process may still write to)
    assert await runs.fetchval("SELECT count(*) FROM dl_jobs WHERE job_id = ANY ($1::uuid[]) "
                               "OR parent_job_id = ANY ($1::uuid[])", [committed.id, rolled_back.id]) == 3


async def test_a_stage_that_cannot_be_stored_fails_the_attempt_with_a_clear_error_and_enqueues_nothing(
        app: App, runs):
    job = await app.enqueue("pattern.fan_out", {"dsn": app.dsn, "parts": 1, "to": "q"}, queue="q", max_attempts=1)
    # A hand-edited plan the engine cannot use: the attempt fails, the finish batch does not.
    await runs.execute("UPDATE dl_jobs SET chain_next = '[{\"nope\": 1}]' WHERE job_id = $1", job.id)
    broken = await app.enqueue("pattern.step", {"dsn": app.dsn}, queue="q", max_attempts=1,
                               then=[Stage("pattern.step", {"dsn": app.dsn})])
    await runs.execute("UPDATE dl_jobs SET chain_next = '{\"not\": \"a list\"}' WHERE job_id = $1", broken.id)

    result = await drain(app, "q", timeout=30)

    assert {j.id for j in result.failed} == {broken.id}
    assert "next stages cannot be enqueued" in (await app.get(broken.id)).error
    assert (await app.get(job.id)).status.value == "succeeded"  # Then replaces a plan, even a broken one


async def test_a_bad_plan_is_refused_at_enqueue_and_writes_nothing(app: App, runs):
    with pytest.raises(InvalidJobRequest, match="args cannot be stored"):
        await app.enqueue("pattern.step", queue="q", then=[Stage("pattern.step", {"text": "a\x00b"})])
    with pytest.raises(ValueError):
        Stage("pattern.step", priority=-1)
    with pytest.raises(ValueError, match="at most 1000"):
        await app.enqueue("pattern.step", queue="q", then=[Stage("s")] * 1001)
    nested = Stage("s", then=[Stage("s")] * 600)
    with pytest.raises(InvalidJobRequest, match="at most 1000"):
        await app.enqueue("pattern.step", queue="q", then=[nested, nested])
    assert await runs.fetchval("SELECT count(*) FROM dl_jobs") == 0


async def test_http_trigger_with_then_and_the_chain_endpoint(app: App, runs, dsn):
    service = create_app(settings_for(dsn), context=app)
    transport = httpx.ASGITransport(app=service)
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
        body = {"queue": "q", "task": "pattern.step", "lock_key": "k", "args": {"dsn": dsn},
                "then": [{"task": "pattern.step", "args": {"dsn": dsn}, "queue": "q"}]}
        created = await client.post("/api/v1/jobs/trigger", json=body)
        assert created.status_code == 201, created.text
        job_id = created.json()["job_id"]
        await drain(app, "q", timeout=30)
        chain = await client.get(f"/api/v1/chains/{job_id}")
        assert chain.status_code == 200
        assert chain.json()["status"] == "succeeded"
        assert [s["result"] for s in chain.json()["stages"]] == [{"n": 1}, {"n": 2}]

        missing = await client.get(f"/api/v1/chains/{uuid.uuid4()}")
        assert missing.status_code == 404 and missing.json()["error"] == "chain_not_found"
        bad = await client.post("/api/v1/jobs/trigger", json={**body, "then": [{"task": "x", "priority": -1}]})
        assert bad.status_code == 422
        unknown_field = await client.post("/api/v1/jobs/trigger", json={**body, "then": [{"task": "x", "oops": 1}]})
        assert unknown_field.status_code == 422
        for stage in ('{"task": "\\ud800"}', '{"task": "x", "args": {"a": "\\ud800"}}',
                      '{"task": "x", "args": {"a": "\\u0000"}}', '{"task": "x", "delay_sec": 1e400}'):
            raw = ('{"queue": "q", "task": "pattern.step", "lock_key": "k", "then": [' + stage + "]}").encode()
            odd = await client.post("/api/v1/jobs/trigger", content=raw, headers={"content-type": "application/json"})
            assert odd.status_code == 422, (stage, odd.text)
    assert await runs.fetchval("SELECT count(*) FROM dl_jobs") == 2


async def _chains_done(db: asyncpg.Pool, roots: list[uuid.UUID], stages: int) -> bool:
    done = await db.fetchval(
        "SELECT count(*) FROM dl_jobs WHERE chain_id = ANY($1) AND status = 'succeeded'", roots)
    return done == len(roots) * stages


@pytest.mark.timeout(120)
async def test_kill_9_between_and_during_stages_runs_every_next_stage_exactly_once(dsn, runs, workers):
    """Chains of 3 stages on two replicas, one of them killed with SIGKILL at random moments: every chain
    ends with exactly 3 jobs, each stage's parent the one before. A stage's pipeline may run again
    after a kill (at-least-once execution), but its next stage is enqueued once."""
    settings = {"pipeline_modules": MODULES, "heartbeat_sec": 0.3, "reaper_period_sec": 0.3}
    async with App(settings_for(dsn)) as producer:
        roots = []
        for i in range(24):
            job = await producer.enqueue(
                "pattern.step", {"dsn": dsn, "seconds": 0.2}, queue="q", lease_ttl_sec=2, lock_key=f"c{i}",
                then=[Stage("pattern.step", {"dsn": dsn, "seconds": 0.2}, lease_ttl_sec=2),
                      Stage("pattern.step", {"dsn": dsn, "seconds": 0.2}, lease_ttl_sec=2)])
            roots.append(job.id)
    rng = random.Random(7)
    kills = 0
    steady = workers(queues={"q": 2}, **settings)  # a replica that lives through every kill
    await steady.wait_ready()
    for _ in range(4):
        victim = workers(queues={"q": 4}, **settings)
        await victim.wait_ready()
        await asyncio.sleep(rng.uniform(0.2, 0.8))  # a random moment to crash at, not a synchronisation
        victim.signal(signal.SIGKILL)
        assert await victim.wait_exit() == -signal.SIGKILL
        kills += 1
    await wait_until(lambda: _chains_done(runs, roots, 3), timeout=60)

    rows = await runs.fetch("SELECT job_id, chain_id, parent_job_id, status, attempt FROM dl_jobs "
                            "WHERE chain_id = ANY($1)", roots)
    assert max(r["attempt"] for r in rows) >= 2, "no kill hit a running stage: the test proved nothing"
    assert len(rows) == 72 and {r["status"] for r in rows} == {"succeeded"}
    by_chain: dict[uuid.UUID, list[asyncpg.Record]] = {}
    for row in rows:
        by_chain.setdefault(row["chain_id"], []).append(row)
    for root, jobs in by_chain.items():
        parents = {r["job_id"]: r["parent_job_id"] for r in jobs}
        assert list(parents.values()).count(None) == 1 and parents[root] is None
        children = [r for r in jobs if r["parent_job_id"] is not None]
        assert len({r["parent_job_id"] for r in children}) == 2, "a stage enqueued its next stage twice"
    assert kills == 4
