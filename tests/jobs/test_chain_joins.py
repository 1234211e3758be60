"""Fan-in for plain chains: `Then(*stages, join=Stage(...))` runs the join once, after every stage
ended, whichever way (finish, failure, cancel, delete, the reaper's `lost`), with their outcomes."""

from __future__ import annotations

import json
import signal
import uuid

import asyncpg
import httpx
import pytest

from dataloader import App, Stage, Then
from dataloader.testing import drain, run_inline_async
from tests.conftest import wait_until
from tests.jobs.conftest import MODULES, settings_for
from tests.support.api_apps import api_for
from tests.support.cli import run


async def _join_of(runs: asyncpg.Pool, root: uuid.UUID) -> asyncpg.Record:
    return await runs.fetchrow("SELECT job_id, status, args, available_at FROM dl_jobs "
                               "WHERE parent_job_id = $1 AND task = 'pattern.join'", root)


async def _members_of(runs: asyncpg.Pool, root: uuid.UUID) -> list[asyncpg.Record]:
    return await runs.fetch("SELECT j.job_id, j.task, j.status FROM dl_chain_join_members m "
                            "JOIN dl_jobs j USING (job_id) WHERE j.parent_job_id = $1 ORDER BY m.position", root)


async def test_the_join_waits_for_every_end_and_runs_once_with_the_outcomes_in_order(app: App, runs):
    root = await app.enqueue("pattern.fan_in", {"dsn": app.dsn, "kinds": ["step", "fail", "later", "step"]},
                             queue="q")
    await drain(app, "q", timeout=30)

    join = await _join_of(runs, root.id)
    assert join["status"] == "queued" and "inputs" not in join["args"]  # the delayed member has not ended
    members = await _members_of(runs, root.id)
    assert [m["status"] for m in members] == ["succeeded", "failed", "queued", "succeeded"]
    assert await runs.fetchval("SELECT remaining FROM dl_chain_joins WHERE join_job_id = $1", join["job_id"]) == 1

    await app.cancel(members[2]["job_id"])  # the last end: a cancel of a queued job
    await drain(app, "q", timeout=30)

    join = await _join_of(runs, root.id)
    assert join["status"] == "succeeded"
    inputs = join["args"]["inputs"]
    assert [(i["job_id"], i["task"], i["status"]) for i in inputs] == [
        (str(m["job_id"]), m["task"], s) for m, s in zip(members, ["succeeded", "failed", "canceled", "succeeded"],
                                                         strict=True)]
    assert inputs[0]["result"] == {"n": 1} and inputs[1]["error"] and "stage failed" in inputs[1]["error"]
    assert await runs.fetchval("SELECT count(*) FROM pattern_runs WHERE task = 'pattern.join'") == 1
    assert (await app.get(join["job_id"])).result == {"succeeded": 2, "members": 4}
    kinds = [e.kind for e in await app.events(join["job_id"])]
    assert kinds.count("joined") == 1 and kinds.index("joined") < kinds.index("done")
    chain = await app.chain(root.id)
    tasks = sorted(j.task for j in chain.jobs)
    assert tasks == ["pattern.fail", "pattern.fan_in", "pattern.join"] + ["pattern.step"] * 3


async def test_a_member_revived_after_the_join_fired_does_not_fire_it_again(app: App, runs):
    root = await app.enqueue("pattern.fan_in", {"dsn": app.dsn, "kinds": ["fail", "step"]}, queue="q")
    await drain(app, "q", timeout=30)
    join = await _join_of(runs, root.id)
    assert join["status"] == "succeeded"
    failed = (await _members_of(runs, root.id))[0]

    await app.retry(failed["job_id"])  # ends failed again: already counted
    await drain(app, "q", timeout=30)

    assert await runs.fetchval("SELECT count(*) FROM pattern_runs WHERE task = 'pattern.fail'") == 2
    assert await runs.fetchval("SELECT count(*) FROM pattern_runs WHERE task = 'pattern.join'") == 1
    assert [i["status"] for i in (await _join_of(runs, root.id))["args"]["inputs"]] == ["failed", "succeeded"]


async def test_a_deleted_or_lost_member_counts_and_says_so(app: App, runs):
    root = await app.enqueue("pattern.fan_in", {"dsn": app.dsn, "kinds": ["later", "later", "step"]}, queue="q")
    await drain(app, "q", timeout=30)
    deleted, lost, _ = await _members_of(runs, root.id)
    # dataloader deletes only finished jobs; an operator's DELETE by hand must still count
    await runs.execute("DELETE FROM dl_jobs WHERE job_id = $1", deleted["job_id"])
    # the reaper's end of a job whose attempts ran out is an UPDATE of its status, as here
    await runs.execute("UPDATE dl_jobs SET status = 'lost', finished_at = now() WHERE job_id = $1", lost["job_id"])
    await drain(app, "q", timeout=30)

    join = await _join_of(runs, root.id)
    assert join["status"] == "succeeded"
    assert [i["status"] for i in join["args"]["inputs"]] == ["deleted", "lost", "succeeded"]
    assert join["args"]["inputs"][0]["task"] is None  # its row is gone; its id is kept
    assert join["args"]["inputs"][0]["job_id"] == str(deleted["job_id"])


async def test_a_join_enqueued_in_the_pipelines_transaction_commits_with_it(app: App, runs):
    root = await app.enqueue("pattern.fan_in_in_transaction", {"dsn": app.dsn, "kinds": ["step", "step"]},
                             queue="q")
    await drain(app, "q", timeout=30)
    join = await _join_of(runs, root.id)
    assert join["status"] == "succeeded" and [i["status"] for i in join["args"]["inputs"]] == ["succeeded"] * 2


async def test_the_join_keeps_its_own_delay_args_and_result_bound(app: App, runs):
    root = await app.enqueue("pattern.fan_in", {"dsn": app.dsn, "kinds": ["step"], "join_args": {"table": "t"}},
                             queue="q")
    await drain(app, "q", timeout=30)
    join = await _join_of(runs, root.id)
    assert join["args"]["table"] == "t" and join["args"]["inputs"][0]["result_omitted"] is False


async def test_run_inline_reports_the_join_stage(dsn, runs):
    result = await run_inline_async("pattern.fan_in", {"dsn": dsn, "kinds": ["step", "fail"]})
    assert [s.task for s in result.next_stages] == ["pattern.step", "pattern.fail"]
    assert result.join_stage is not None and result.join_stage.task == "pattern.join"


def test_a_then_with_a_join_refuses_idempotency_keys_and_non_stages():
    with pytest.raises(ValueError, match="idempotency_key"):
        Then(Stage("a", idempotency_key="k"), join=Stage("j"))
    with pytest.raises(ValueError, match="idempotency_key"):
        Then(Stage("a"), join=Stage("j", idempotency_key="k"))
    with pytest.raises(TypeError, match="join must be a Stage"):
        Then(Stage("a"), join="j")  # type: ignore[arg-type]
    assert "join=j" in repr(Then(Stage("a"), join=Stage("j")))


@pytest.mark.timeout(120)
async def test_members_ending_at_once_on_two_processes_fire_the_join_exactly_once(dsn, runs, workers):
    """300 members finished by two worker processes, 8 slots each, one of them killed with SIGKILL
    midway (its members go back via the reaper): the join fires once, with every member counted."""
    settings = {"pipeline_modules": MODULES, "heartbeat_sec": 0.3, "reaper_period_sec": 0.3}
    async with App(settings_for(dsn)) as producer:
        root = await producer.enqueue("pattern.fan_in", {"dsn": dsn, "kinds": ["step"] * 300, "seconds": 0.02},
                                      queue="q", lease_ttl_sec=2)
    steady = workers(queues={"q": 8}, **settings)
    victim = workers(queues={"q": 8}, **settings)
    await steady.wait_ready()
    await victim.wait_ready()

    async def members_done() -> int:
        return await runs.fetchval("SELECT count(*) FROM dl_jobs WHERE parent_job_id = $1 AND status = 'succeeded' "
                                   "AND task = 'pattern.step'", root.id)

    await wait_until(lambda: _at_least(members_done, 60), timeout=60)
    victim.signal(signal.SIGKILL)
    assert await victim.wait_exit() == -signal.SIGKILL

    async def join_done() -> bool:
        join = await _join_of(runs, root.id)
        return join is not None and join["status"] == "succeeded"

    await wait_until(join_done, timeout=90)
    join = await _join_of(runs, root.id)
    assert len(join["args"]["inputs"]) == 300 and {i["status"] for i in join["args"]["inputs"]} == {"succeeded"}
    assert await runs.fetchval("SELECT count(*) FROM pattern_runs WHERE task = 'pattern.join'") == 1
    assert await runs.fetchval("SELECT count(*) FROM dl_job_events WHERE job_id = $1 AND kind = 'joined'",
                               join["job_id"]) == 1


async def _at_least(count, n: int) -> bool:
    return await count() >= n


async def test_every_face_shows_a_join_waiting_and_then_done(app: App, runs, cli_env):
    root = await app.enqueue("pattern.fan_in", {"dsn": app.dsn, "kinds": ["step", "later"]}, queue="q")
    await drain(app, "q", timeout=30)
    join = await _join_of(runs, root.id)
    python = (await app.chain(root.id)).joins[join["job_id"]]
    assert (python.members, python.remaining) == (2, 1)

    transport = httpx.ASGITransport(app=api_for(app))
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
        stages = (await client.get(f"/api/v1/chains/{root.id}")).json()["stages"]
        assert [s.get("join") for s in stages if s["task"] == "pattern.join"] == [{"members": 2, "remaining": 1}]
        assert all(s.get("join") is None for s in stages if s["task"] != "pattern.join")
        page = await client.get(f"/ui/jobs/{join['job_id']}")
        assert page.status_code == 200 and "joins 2: waits for 1 more" in page.text
        cli = json.loads(run(["jobs", "chain", str(root.id)], cli_env).stdout)
        assert [s.get("join") for s in cli["stages"] if s["task"] == "pattern.join"] == [{"members": 2, "remaining": 1}]

        later = next(m for m in await _members_of(runs, root.id) if m["status"] == "queued")
        await app.cancel(later["job_id"])
        await drain(app, "q", timeout=30)
        stages = (await client.get(f"/api/v1/chains/{root.id}")).json()["stages"]
        assert [s["join"] for s in stages if s["task"] == "pattern.join"] == [{"members": 2, "remaining": 0}]
        page = await client.get(f"/ui/jobs/{join['job_id']}")
        assert "joins 2</span>" in page.text and "waits for" not in page.text
