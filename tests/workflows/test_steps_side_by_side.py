"""Steps side by side: `wf.gather(wf.call(...), ...)` runs them concurrently in one attempt, each
recorded at its own position in the order given; a replay runs only what is not recorded."""

from __future__ import annotations

import asyncpg

from dataloader import App
from dataloader.workflows.registry import WorkflowRegistry
from dataloader.workflows.testing import WorkflowTest
from tests.workflows.conftest import probe_counts


async def test_steps_run_together_record_in_order_and_retry_alone(app: App, dsn: str, wdb: asyncpg.Pool):
    async with app.running():
        run_id = await app.workflows.start("t.side_by_side", {"dsn": dsn})
        result = await app.workflows.result(run_id, timeout=30)
    assert result == [f"a:{run_id}:1", f"b:{run_id}:2", f"c:{run_id}:3"]  # each its own key
    assert await probe_counts(wdb, run_id) == {"a": 1, "b": 2, "c": 1}  # only b ran again
    steps = await wdb.fetch("SELECT seq, name, finished_at FROM dl_workflow_steps WHERE run_id = $1 ORDER BY seq",
                            run_id)
    assert [s["name"] for s in steps] == ["a", "b", "c"]  # the order given, though a ended last
    starts = await wdb.fetch("SELECT step, min(at) AS at FROM wf_probe WHERE run_id = $1 GROUP BY step",
                             str(run_id))
    first_record = min(s["finished_at"] for s in steps)
    # side by side: all three began before any of them was recorded
    assert all(s["at"] < first_record for s in starts), (starts, first_record)


async def test_a_step_failed_for_good_is_returned_or_raised(app: App, dsn: str, wdb: asyncpg.Pool):
    async with app.running():
        run_id = await app.workflows.start("t.side_by_side", {"dsn": dsn, "c_fails": True})
        result = await app.workflows.result(run_id, timeout=30)
    assert result[:2] == [f"a:{run_id}:1", f"b:{run_id}:2"] and "c refuses" in result[2]
    assert [s.state for s in (await app.workflows.get(run_id)).steps] == ["done", "done", "failed"]


async def test_steps_and_children_do_not_mix_in_one_gather():
    registry = WorkflowRegistry()

    async def mixed(wf, input):
        return await wf.gather(wf.call("s", lambda: 1), wf.child("t.steps", {}))

    registry.register("t.mixed", mixed)
    run = await WorkflowTest.start("t.mixed", None, registry=registry)
    assert run.status == "failed" and "not both in one gather" in (run.error or "")
