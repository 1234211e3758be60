"""The node side of the workflows in the chaos run: two registered workflows whose every step writes
a row to an independent probe table (see workflows.py for the client and the checks).

Loaded by the chaos nodes only, through DL_PIPELINE_MODULES (nodes.py): importing it registers the
workflows (and their run jobs' pipelines) in the importing process, in the queue named by
CHAOS_WF_QUEUE (the run's own workflow queue, served by the nodes' WORKERS_JSON).

`chaos.order`: a step, a durable sleep, a step, a wait for the signal "go" (sent by the harness,
before the wait for some runs and after it for the others), a gather of `children` runs of
`chaos.part` (one step each), a last step. Every step function (`probe_step`) first inserts its
start into `chaos_wf_steps` on a connection of its own (never the engine's): run id, step name,
`wf.step_key`, the node's pid and name, the run's attempt and `clock_timestamp()` — then works for
`step_sec`. So a step function that ran twice shows as two rows of one step_key, and one that ran
after its result was recorded as a row later than that step's `finished_at`.
"""

from __future__ import annotations

import asyncio
import os
import time
import uuid
from typing import Any

import asyncpg

from dataloader import workflow
from tests.chaos.pipelines import CONNECTION_ERRORS, RECONNECT_DEADLINE_SEC, chaos_dsn
from tests.chaos.workflows import ORDER, PART, SIGNAL

QUEUE = os.environ.get("CHAOS_WF_QUEUE", "chaos-workflows")


async def record_start(dsn: str, run_id: str, name: str, step_key: str, attempt: int) -> str:
    """The step function's start, on a connection of its own, retried across a database restart
    (one row per call: the invocation id makes a retried insert a no-op)."""
    invocation = str(uuid.uuid4())
    deadline = time.monotonic() + RECONNECT_DEADLINE_SEC
    while True:
        try:
            conn = await asyncpg.connect(dsn, timeout=5)
            try:
                await conn.execute(
                    "INSERT INTO chaos_wf_steps (invocation, run_id, name, step_key, pid, node, run_attempt, "
                    "started_at) VALUES ($1, $2, $3, $4, $5, $6, $7, clock_timestamp()) "
                    "ON CONFLICT (invocation) DO NOTHING",
                    uuid.UUID(invocation), uuid.UUID(run_id), name, step_key, os.getpid(),
                    os.environ.get("DL_NODE_NAME", "in-process"), attempt, timeout=10)
                return invocation
            finally:
                conn.terminate()
        except CONNECTION_ERRORS:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.2)


async def probe_step(wf: Any, name: str, dsn: str, step_sec: float) -> dict[str, Any]:
    """Record the start, then work for `step_sec`; the result names this call (its invocation), so the
    recorded result says which call of the step was the one recorded."""
    invocation = await record_start(dsn, str(wf.run_id), name, wf.step_key, wf.attempt)
    await asyncio.sleep(step_sec)
    return {"key": wf.step_key, "invocation": invocation, "pid": os.getpid()}


@workflow(ORDER, queue=QUEUE, max_attempts=25)
async def chaos_order(wf: Any, order: dict[str, Any]) -> dict[str, Any]:
    dsn = chaos_dsn(order)
    step_sec = float(order["step_sec"])
    first = await wf.step("prepare", probe_step, wf, "prepare", dsn, step_sec)
    await wf.sleep(float(order["sleep_sec"]))
    woke = await wf.step("after-sleep", probe_step, wf, "after-sleep", dsn, step_sec)
    go = await wf.wait_for(SIGNAL)
    parts = await wf.gather(*(wf.child(PART, {"i": i, "step_sec": step_sec}) for i in range(int(order["children"]))))
    last = await wf.step("finish", probe_step, wf, "finish", dsn, step_sec)
    return {"n": order["n"], "signal": go, "parts": parts, "keys": [first["key"], woke["key"], last["key"]]}


@workflow(PART, queue=QUEUE, max_attempts=25)
async def chaos_part(wf: Any, part: dict[str, Any]) -> dict[str, Any]:
    done = await wf.step("part", probe_step, wf, "part", chaos_dsn(part), float(part["step_sec"]))
    return {"i": part["i"], "key": done["key"]}
