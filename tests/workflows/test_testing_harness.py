"""dataloader.workflows.testing: a workflow run in memory with the test's clock and signals — the
engine's own `wf` replayed after every hand-back, so replays run no recorded step, sleeps end when
the clock passes them, waits take stored signals or time out, retries wait out their backoff, and a
gather joins children that end every way."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from dataloader import FatalError, WorkflowFinished
from dataloader.exceptions import UnknownWorkflow
from dataloader.workers.pipelines.registry import PipelineRegistry
from dataloader.workflows.registry import WorkflowRegistry
from dataloader.workflows.testing import WorkflowTest

FLOWS = WorkflowRegistry(PipelineRegistry())  # kept out of the engine's registries
T0 = datetime(2026, 1, 1, 9, 0, tzinfo=UTC)
outside: list[str] = []  # what the steps did to "the outside world"


async def reserve(order: int) -> dict[str, Any]:
    outside.append(f"reserve {order}")
    return {"parts": [1, 2, 3]}


async def fulfil(wf: Any, order: int) -> dict[str, Any]:
    stock = await wf.step("reserve", reserve, order)
    await wf.sleep(timedelta(hours=2))
    paid = await wf.wait_for("payment", timeout=timedelta(days=3))
    if paid is None:
        return {"packed": 0, "reason": "not paid"}
    parts = await wf.gather(*(wf.child("pack", part) for part in stock["parts"]))
    return {"packed": len(parts), "parts": parts}


async def pack(wf: Any, part: int) -> int:
    if part == 99:
        raise FatalError("part 99 cannot be packed")
    await wf.sleep(60 * part)  # part n takes n minutes
    return await wf.step("pack", lambda: part * 10)


def flaky(wf: Any, _input: Any) -> int:
    def call() -> int:
        outside.append("flaky")
        if outside.count("flaky") < 3:
            raise RuntimeError("not yet")
        return outside.count("flaky")

    return wf.step("call", call, max_attempts=5, backoff=lambda n: 30.0)


FLOWS.register("fulfil", fulfil)
FLOWS.register("pack", pack)
FLOWS.register("flaky", flaky)


@pytest.fixture(autouse=True)
def clean_outside() -> None:
    outside.clear()


async def test_sleep_signal_and_gather_run_on_the_tests_clock() -> None:
    run = await WorkflowTest.start("fulfil", 7, now=T0, registry=FLOWS)
    assert run.status == "waiting" and run.steps[2].kind == "sleep"
    assert run.steps[2].wake_at == T0 + timedelta(hours=2)
    await run.advance(hours=1, minutes=59)
    assert run.status == "waiting" and 3 not in run.steps  # still asleep
    await run.advance(minutes=1)
    assert run.steps[3].kind == "wait" and run.steps[3].state == "pending"
    await run.signal("payment", {"paid": True})
    # three children, sleeping 1, 2 and 3 minutes: the join waits for the last
    assert [c.status for c in run.children] == ["waiting"] * 3 and run.status == "waiting"
    await run.advance(minutes=2)
    assert [c.status for c in run.children] == ["succeeded", "succeeded", "waiting"] and run.status == "waiting"
    await run.advance(minutes=1)
    assert run.status == "succeeded"
    assert run.result == {"packed": 3, "parts": [10, 20, 30]}
    assert outside == ["reserve 7"]  # replayed five times, reserved once
    assert run.step_runs["reserve"] == 1 and run.step_runs["pack"] == 3
    assert run.attempts >= 4


async def test_a_wait_times_out_on_the_tests_clock() -> None:
    run = await WorkflowTest.start("fulfil", 8, now=T0, registry=FLOWS)
    await run.advance(hours=2)
    await run.advance(days=3)
    assert run.status == "succeeded" and run.result == {"packed": 0, "reason": "not paid"}
    assert run.steps[3].error == "timeout"


async def test_a_signal_sent_before_the_wait_is_kept_for_it() -> None:
    run = await WorkflowTest.start("fulfil", 9, now=T0, registry=FLOWS)
    await run.signal("payment", True)
    assert run.status == "waiting" and 3 not in run.steps
    await run.advance(hours=2)
    assert run.steps[3].result is True and run.status == "waiting"  # now joining its children


async def test_a_sync_step_retries_after_its_backoff_passes() -> None:
    run = await WorkflowTest.start("flaky", None, now=T0, registry=FLOWS)
    assert run.status == "waiting" and run.steps[1].attempts == 1
    await run.advance(29)
    assert outside == ["flaky"]  # the backoff has not passed
    await run.advance(1)
    await run.advance(30)
    assert run.status == "succeeded" and run.result == 3 and run.steps[1].attempts == 3


async def test_a_child_that_fails_fails_the_join_and_an_ended_run_takes_no_signal() -> None:
    async def broken(wf: Any, _input: Any) -> Any:
        return await wf.gather(wf.child("pack", 1), wf.child("pack", 99))

    registry = WorkflowRegistry(PipelineRegistry())
    registry.register("pack", pack)
    registry.register("broken", broken)
    run = await WorkflowTest.start("broken", None, now=T0, registry=registry)
    assert [c.status for c in run.children] == ["waiting", "failed"]
    await run.advance(minutes=1)
    assert run.status == "failed" and "part 99 cannot be packed" in (run.error or "")
    with pytest.raises(WorkflowFinished):
        await run.signal("late")


async def test_code_that_no_longer_matches_the_history_fails_the_run() -> None:
    async def first(wf: Any, _input: Any) -> None:
        await wf.step("a", lambda: 1)
        await wf.sleep(10)

    registry = WorkflowRegistry(PipelineRegistry())
    registry.register("v", first)
    run = await WorkflowTest.start("v", None, now=T0, registry=registry)

    async def second(wf: Any, _input: Any) -> None:  # a deploy renamed the first step
        await wf.step("b", lambda: 1)
        await wf.sleep(10)

    registry.register("v", second, replace=True)
    run.definition = registry.get("v")  # type: ignore[assignment]
    await run.advance(10)
    assert run.status == "failed" and "position 1" in (run.error or "") and "'a'" in (run.error or "")


async def test_an_unknown_workflow_is_refused() -> None:
    with pytest.raises(UnknownWorkflow):
        await WorkflowTest.start("nope", registry=FLOWS)
