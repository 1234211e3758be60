"""A deadline for a whole run: past it the run fails — sleeping, waiting, joining or in a step —
and its unfinished children are canceled. Every face takes the same deadline and refuses the same
bad ones."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import httpx
import pytest

from dataloader import App, ValidationFailed, WorkflowFailed
from tests.conftest import wait_until
from tests.support.api_apps import api_for
from tests.support.cli import run as cli


async def _fails_for_deadline(app: App, run_id) -> str:
    with pytest.raises(WorkflowFailed) as failed:
        await app.workflows.result(run_id, timeout=30)
    assert failed.value.args[0] and "deadline" in failed.value.args[0]
    return failed.value.args[0]


async def test_a_sleeping_run_wakes_for_its_deadline_and_fails(app: App, dsn: str):
    async with app.running():
        # a deadline the run reaches asleep: 1.5 s was sometimes over before a loaded machine had run
        # the first step, and the run failed without having slept
        run_id = await app.workflows.start("t.sleep", {"dsn": dsn, "seconds": 3600}, deadline=6)

        async def asleep() -> bool:
            return [s.kind for s in (await app.workflows.get(run_id)).steps] == ["step", "sleep"]
        await wait_until(asleep, timeout=6, message="the run to be asleep before its deadline")
        await _fails_for_deadline(app, run_id)
    run = await app.workflows.get(run_id)
    assert run.status == "failed" and run.deadline_at is not None
    assert [s.kind for s in run.steps] == ["step", "sleep"]  # it slept, and did not go on


async def test_a_step_in_flight_is_interrupted_at_the_deadline(app: App, dsn: str, wdb):
    async with app.running():
        run_id = await app.workflows.start("t.slow_step", {"dsn": dsn, "seconds": 60}, deadline=timedelta(seconds=2))
        await _fails_for_deadline(app, run_id)
    assert await wdb.fetchval("SELECT count(*) FROM wf_probe WHERE run_id = $1", str(run_id)) == 1
    assert (await app.workflows.get(run_id)).steps == []  # nothing recorded for the cut step


async def test_a_joining_run_fails_at_its_deadline_and_its_children_are_canceled(app: App, dsn: str, wdb):
    async with app.running():
        run_id = await app.workflows.start("t.gather", {"dsn": dsn, "modes": ["wait", "wait"]}, deadline="2s")
        await _fails_for_deadline(app, run_id)
    children = await wdb.fetch("SELECT r.deadline_at, j.status::text AS status, j.error FROM dl_workflow_runs r "
                               "JOIN dl_jobs j ON j.job_id = r.run_id WHERE r.parent_run_id = $1", run_id)
    parent = await app.workflows.get(run_id)
    # ended either way, at the same moment: canceled by the parent, or failed at the deadline they share
    ended = [c["status"] == "canceled" or (c["status"] == "failed" and "deadline" in c["error"]) for c in children]
    assert ended == [True, True], [dict(c) for c in children]
    assert {c["deadline_at"] for c in children} == {parent.deadline_at}  # a child gets its parent's


async def test_a_restart_clears_the_deadline(app: App, dsn: str):
    async with app.running():
        run_id = await app.workflows.start("t.sleep", {"dsn": dsn, "seconds": 3600}, deadline=1)
        await _fails_for_deadline(app, run_id)
        restarted = await app.workflows.restart(run_id)
    assert restarted.deadline_at is None


@pytest.mark.parametrize("bad", [0, -1, 0.5, "soon", "", float("nan"), 3651 * 86400, True])
async def test_a_bad_deadline_is_refused_on_every_face_and_starts_nothing(app: App, dsn: str, wdb, cli_env, bad):
    before = await wdb.fetchval("SELECT count(*) FROM dl_workflow_runs")
    if not isinstance(bad, bool):
        with pytest.raises(ValidationFailed, match="deadline"):
            await app.workflows.start("t.steps", {"dsn": dsn}, deadline=bad)
    transport = httpx.ASGITransport(app=api_for(app))
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
        raw = json.dumps({"workflow": "t.steps", "input": {"dsn": dsn}, "deadline": bad}) \
            if bad == bad else '{"workflow": "t.steps", "deadline": NaN}'
        answer = await client.post("/api/v1/workflows", content=raw, headers={"content-type": "application/json"})
        assert answer.status_code == 422, answer.text
    if isinstance(bad, str) or (isinstance(bad, int) and not isinstance(bad, bool)):
        made = cli(["workflows", "start", "t.steps", "--input", json.dumps({"dsn": dsn}), "--deadline", str(bad)],
                   cli_env)
        assert made.returncode == 2 and "deadline" in made.stderr and made.stderr.count("\n") <= 1, made.stderr
    assert await wdb.fetchval("SELECT count(*) FROM dl_workflow_runs") == before


async def test_every_face_sets_the_same_deadline(app: App, dsn: str, cli_env):
    started = datetime.now(UTC)
    python = await app.workflows.get(await app.workflows.start("t.steps", {"dsn": dsn}, deadline="2h"))
    transport = httpx.ASGITransport(app=api_for(app))
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
        answer = await client.post("/api/v1/workflows", json={"workflow": "t.steps", "input": {"dsn": dsn},
                                                              "deadline": 7200})
        assert answer.status_code == 201, answer.text
        http = datetime.fromisoformat(answer.json()["deadline_at"])
        page = await client.get(f"/ui/workflows/{python.run_id}")
        assert page.status_code == 200 and 'id="run-deadline"' in page.text
    made = cli(["workflows", "start", "t.steps", "--input", json.dumps({"dsn": dsn}), "--deadline", "120m"], cli_env)
    assert made.returncode == 0, made.stderr
    from_cli = datetime.fromisoformat(json.loads(made.stdout)["deadline_at"])
    for deadline in (python.deadline_at, http, from_cli):
        assert deadline is not None
        assert timedelta(hours=2) - timedelta(seconds=5) < deadline - started < timedelta(hours=2, seconds=30)
