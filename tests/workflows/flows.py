"""The workflows the tests run, in process and in `dataloader worker` child processes
(DL_PIPELINE_MODULES=tests.workflows.flows). Every step writes a row to `wf_probe`, a table
outside the engine, so a test counts how often each step really ran and with which key."""

from __future__ import annotations

import asyncio
import os
import time
from datetime import timedelta
from typing import Any

import asyncpg

from dataloader import FatalError, Workflow, workflow
from dataloader.workflows import SyncWorkflow

QUEUE = "wf"

PROBE_DDL = """
CREATE TABLE IF NOT EXISTS wf_probe (
    id bigserial PRIMARY KEY,
    run_id text NOT NULL,
    step text NOT NULL,
    step_key text,
    pid int NOT NULL,
    at timestamptz NOT NULL DEFAULT clock_timestamp()
)
"""


async def probe(dsn: str, wf: Workflow, step: str, pause: float = 0.0) -> int:
    """Record one execution of `step`; returns how many times it ran so far (this one included)."""
    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute("INSERT INTO wf_probe (run_id, step, step_key, pid) VALUES ($1, $2, $3, $4)",
                           str(wf.run_id), step, wf.step_key, os.getpid())
        count = await conn.fetchval("SELECT count(*) FROM wf_probe WHERE run_id = $1 AND step = $2",
                                    str(wf.run_id), step)
    finally:
        await conn.close()
    if pause and count == 1:  # only its first execution lingers (the one a test kills)
        await asyncio.sleep(pause)
    return count


@workflow("t.steps", queue=QUEUE)
async def three_steps(wf: Workflow, input: dict[str, Any]) -> dict[str, Any]:
    dsn = input["dsn"]
    one = await wf.step("one", probe, dsn, wf, "one")
    two = await wf.step("two", probe, dsn, wf, "two", input.get("pause", 0.0))
    three = await wf.step("three", probe, dsn, wf, "three")
    return {"one": one, "two": two, "three": three}


@workflow("t.sleep", queue=QUEUE)
async def sleeper(wf: Workflow, input: dict[str, Any]) -> dict[str, Any]:
    dsn = input["dsn"]
    before = await wf.step("before", probe, dsn, wf, "before")
    await wf.sleep(timedelta(seconds=input["seconds"]))
    after = await wf.step("after", probe, dsn, wf, "after")
    return {"before": before, "after": after}


@workflow("t.wait", queue=QUEUE)
async def waiter(wf: Workflow, input: dict[str, Any]) -> dict[str, Any]:
    await wf.step("started", probe, input["dsn"], wf, "started")
    first = await wf.wait_for("go", timeout=input.get("timeout"))
    second = await wf.wait_for("go", timeout=input.get("timeout")) if input.get("twice") else None
    return {"first": first, "second": second}


@workflow("t.child", queue=QUEUE)
async def child(wf: Workflow, input: dict[str, Any]) -> Any:
    mode = input.get("mode", "ok")
    await wf.step("work", probe, input["dsn"], wf, f"child-{input['i']}")
    if mode == "fail":
        raise ValueError(f"child {input['i']} refuses")
    if mode == "wait":
        return await wf.wait_for("go")
    if mode == "hold":  # running until canceled: a step that lingers (its first execution)
        await wf.step("hold", probe, input["dsn"], wf, f"hold-{input['i']}", 600)
    return input["i"] * 10


@workflow("t.gather", queue=QUEUE)
async def gatherer(wf: Workflow, input: dict[str, Any]) -> dict[str, Any]:
    modes = input["modes"]
    results = await wf.gather(*(wf.child("t.child", {"dsn": input["dsn"], "i": i, "mode": m})
                                for i, m in enumerate(modes)), return_exceptions=True,
                            fail_fast=input.get("fail_fast", False))
    after = await wf.step("after", probe, input["dsn"], wf, "after-join")
    return {"results": [r if not isinstance(r, Exception) else f"failed: {r.status}" for r in results],
            "after": after}


FIXED_DDL = "CREATE TABLE IF NOT EXISTS wf_fixed (fixed boolean PRIMARY KEY)"


async def broken_until_fixed(dsn: str, wf: Workflow) -> int:
    """Step two of t.bulkfix: fails for good until a row in wf_fixed says the code was fixed."""
    runs = await probe(dsn, wf, "two")
    conn = await asyncpg.connect(dsn)
    try:
        fixed = await conn.fetchval("SELECT count(*) FROM wf_fixed")
    finally:
        await conn.close()
    if not fixed:
        raise FatalError("a bad deploy: step two is broken")
    return runs


@workflow("t.bulkfix", queue=QUEUE)
async def bulk_fixable(wf: Workflow, input: dict[str, Any]) -> dict[str, Any]:
    """Three steps, the second broken until fixed (a bulk restart from it after the fix); with
    `wait`, the run waits for a signal "go" after step one (a run that has not ended)."""
    dsn = input["dsn"]
    one = await wf.step("one", probe, dsn, wf, "one")
    if input.get("wait"):
        await wf.wait_for("go")
    two = await wf.step("two", broken_until_fixed, dsn, wf)
    three = await wf.step("three", probe, dsn, wf, "three")
    return {"one": one, "two": two, "three": three}


@workflow("t.flaky", queue=QUEUE)
async def flaky(wf: Workflow, input: dict[str, Any]) -> dict[str, Any]:
    async def attempt() -> int:
        runs = await probe(input["dsn"], wf, "flaky")
        if runs < input["succeed_on"]:
            raise RuntimeError(f"not yet ({runs})")
        return runs

    async def fatal() -> None:
        await probe(input["dsn"], wf, "fatal")
        raise FatalError("never")

    value = await wf.step("flaky", attempt, max_attempts=input.get("max_attempts", 5), backoff=lambda n: 0.1)
    if input.get("fatal"):
        await wf.step("fatal", fatal, max_attempts=5)
    return {"value": value}


@workflow("t.sync", queue=QUEUE)
def sync_flow(wf: SyncWorkflow, input: dict[str, Any]) -> dict[str, Any]:
    def blocking(x: int) -> int:
        time.sleep(0.01)
        return x + 1

    a = wf.step("blocking", blocking, input["x"])
    wf.sleep(0.2)
    got = wf.wait_for("go", timeout=input.get("timeout", 30))
    return {"a": a, "got": got}


@workflow("t.versioned", queue=QUEUE)
async def versioned(wf: Workflow, input: dict[str, Any]) -> list[str]:
    """Version 1; tests/workflows/test_workflows.py deploys version 2 (versioned_v2) under a running run."""
    await wf.step("a", probe, input["dsn"], wf, "a")
    await wf.sleep(input["sleep"])
    await wf.step("b", probe, input["dsn"], wf, "b")
    return ["a", "b"]


async def versioned_v2(wf: Workflow, input: dict[str, Any]) -> list[str]:
    done = []
    if await wf.patched("charge-first"):
        await wf.step("charge", probe, input["dsn"], wf, "charge")
        done.append("charge")
    await wf.step("a", probe, input["dsn"], wf, "a")
    done.append("a")
    await wf.sleep(input["sleep"])
    if await wf.patched("notify-after-sleep"):
        await wf.step("notify", probe, input["dsn"], wf, "notify")
        done.append("notify")
    await wf.step("b", probe, input["dsn"], wf, "b")
    return [*done, "b"]


@workflow("t.fixable", queue=QUEUE)
async def fixable(wf: Workflow, input: dict[str, Any]) -> dict[str, Any]:
    """Step b fails until it has run `fix_after` times (a bug fixed by then): restart from b."""
    async def b() -> int:
        runs = await probe(input["dsn"], wf, "b")
        if runs < input["fix_after"]:
            raise FatalError(f"bug (run {runs})")
        return runs

    a = await wf.step("a", probe, input["dsn"], wf, "a")
    got = await wf.wait_for("go", timeout=0.1) if input.get("wait") else None
    value = await wf.step("b", b)
    c = await wf.step("c", probe, input["dsn"], wf, "c")
    return {"a": a, "b": value, "c": c, "got": got}


@workflow("t.slow_step", queue=QUEUE)
async def slow_step(wf: Workflow, input: dict[str, Any]) -> str:
    """One step that works `seconds` (probed as it starts): a deadline interrupts it."""
    async def work() -> str:
        await probe(input["dsn"], wf, "slow")
        await asyncio.sleep(float(input["seconds"]))
        return "done"

    return await wf.step("slow", work)


@workflow("t.approval", queue=QUEUE)
async def approval(wf: Workflow, input: dict[str, Any]) -> dict[str, Any]:
    """Hands a wait token to a third party (here: the probe table) and waits for its completion."""
    token = await wf.token("approval")

    async def hand_out() -> str:
        conn = await asyncpg.connect(input["dsn"])
        try:
            await conn.execute("INSERT INTO wf_probe (run_id, step, step_key, pid) VALUES ($1, 'token', $2, $3)",
                               str(wf.run_id), token.token, os.getpid())
        finally:
            await conn.close()
        return "sent"

    await wf.step("hand_out", hand_out)
    answer = await wf.wait_for(token, timeout=input.get("timeout"))
    again = await wf.token("approval")  # a second position: another token
    return {"answer": answer, "same_token_on_replay": again.token != token.token}


TX_DDL = "CREATE TABLE IF NOT EXISTS wf_tx (id bigserial PRIMARY KEY, run_id text NOT NULL, n int NOT NULL)"


@workflow("t.tx", queue=QUEUE)
async def transactional(wf: Workflow, input: dict[str, Any]) -> dict[str, Any]:
    """A step that writes in the transaction that records it: its row commits with the record. Its
    first execution lingers `pause` s inside the transaction (the one a test kills), or fails with
    `fail_first`."""
    async def write(conn: asyncpg.Connection, n: int) -> int:
        runs = await probe(input["dsn"], wf, "tx")
        await conn.execute("INSERT INTO wf_tx (run_id, n) VALUES ($1, $2)", str(wf.run_id), n)
        if runs == 1 and input.get("fail_first"):
            raise RuntimeError("first execution fails after its write")
        if runs == 1 and input.get("pause"):
            await asyncio.sleep(float(input["pause"]))
        return await conn.fetchval("SELECT count(*) FROM wf_tx WHERE run_id = $1", str(wf.run_id))

    seen = await wf.step("write", write, 7, transaction=True, backoff=lambda attempt: 0.1)
    return {"rows_seen_in_step": seen}


@workflow("t.side_by_side", queue=QUEUE)
async def side_by_side(wf: Workflow, input: dict[str, Any]) -> list[Any]:
    """Three steps in one gather: `a` the slowest, `b` fails its first execution (retried), `c`
    fails for good when `c_fails`."""
    dsn = input["dsn"]

    async def work(name: str, seconds: float) -> str:
        runs = await probe(dsn, wf, name)
        await asyncio.sleep(seconds)
        if name == "b" and runs == 1:
            raise RuntimeError("b's first execution fails")
        if name == "c" and input.get("c_fails"):
            raise FatalError("c refuses")
        return f"{name}:{wf.step_key}"

    results = await wf.gather(wf.call("a", work, "a", 0.6), wf.call("b", work, "b", 0.2, backoff=lambda n: 0.1),
                              wf.call("c", work, "c", 0.1, max_attempts=1), return_exceptions=True)
    return [str(r) if isinstance(r, Exception) else r for r in results]


# Restart from before a gather (tests/workflows/test_restart_gather.py): the children whose index is
# in BROKEN_CHILDREN fail (the bug a restart follows a fix of), those in HELD_CHILDREN go to a
# queue no worker serves, where the test itself moves them (a worker that holds one, its end).
IDLE_QUEUE = "wf-idle"
BROKEN_CHILDREN: set[int] = set()
BROKEN_FINISH: set[str] = set()  # the `finish` keys of runs whose last step fails
HELD_CHILDREN: set[int] = set()


@workflow("t.regather_child", queue=QUEUE)
async def regather_child(wf: Workflow, input: dict[str, Any]) -> int:
    async def work() -> int:
        await probe(input["dsn"], wf, "work")
        if input["i"] in BROKEN_CHILDREN:
            raise FatalError(f"child {input['i']} is broken")
        return input["i"] * 10

    return await wf.step("work", work)


@workflow("t.regather", queue=QUEUE)
async def regather(wf: Workflow, input: dict[str, Any]) -> dict[str, Any]:
    """Two steps, then a gather of three children: restart from `plan` re-runs plan and the gather."""
    dsn = input["dsn"]
    await wf.step("prepare", probe, dsn, wf, "prepare")
    await wf.step("plan", probe, dsn, wf, "plan")
    results = await wf.gather(*(wf.child("t.regather_child", {"dsn": dsn, "i": i},
                                          queue=IDLE_QUEUE if i in HELD_CHILDREN else None) for i in range(3)),
                              fail_fast=input.get("fail_fast", False))
    if input.get("finish"):
        async def finish() -> str:
            if input["finish"] in BROKEN_FINISH:
                raise FatalError("finish is broken")
            return "finished"

        return {"results": results, "finish": await wf.step("finish", finish)}
    return {"results": results}
