"""The workflows of tests/workflows/test_step_jobs.py: steps with job options of their own (a queue,
a lock_key), run in process and in `dataloader worker` child processes
(DL_PIPELINE_MODULES=tests.workflows.step_flows). Every step function writes to `wf_probe` (a table
outside the engine: how often it really ran, with which key and in which process) and, for the
overlap tests, its start and end to `wf_spans`."""

from __future__ import annotations

import asyncio
import os
from typing import Any

import asyncpg

from dataloader import Workflow, workflow
from dataloader.workflows import StepFailed
from tests.workflows.flows import probe

QUEUE = "wf"
STEP_QUEUE = "pay"

SPANS_DDL = """
CREATE TABLE IF NOT EXISTS wf_spans (
    id bigserial PRIMARY KEY,
    run_id text NOT NULL,
    pid int NOT NULL,
    started timestamptz NOT NULL,
    ended timestamptz NOT NULL
)
"""

# Flipped by the HistoryMismatch test (in process): the code now asks for another step at position 1.
RENAMED = {"charge": "charge"}


async def charge(dsn: str, wf: Workflow, amount: int, pause: float = 0.0) -> dict[str, Any]:
    count = await probe(dsn, wf, "charge", pause)
    return {"charged": amount, "pid": os.getpid(), "count": count, "key": wf.step_key}


async def spanned(dsn: str, wf: Workflow, hold: float) -> int:
    """Hold the step for `hold` seconds and write when it began and ended (the database's clock)."""
    await probe(dsn, wf, "spanned")
    conn = await asyncpg.connect(dsn)
    try:
        started = await conn.fetchval("SELECT clock_timestamp()")
        await asyncio.sleep(hold)
        await conn.execute("INSERT INTO wf_spans (run_id, pid, started, ended) VALUES ($1, $2, $3, clock_timestamp())",
                           str(wf.run_id), os.getpid(), started)
    finally:
        await conn.close()
    return os.getpid()


async def flaky(dsn: str, wf: Workflow, failures: int) -> int:
    count = await probe(dsn, wf, "flaky")
    if count <= failures:
        raise RuntimeError(f"flaky failure {count}")
    return count


@workflow("t.sj.charge", queue=QUEUE)
async def pay_elsewhere(wf: Workflow, input: dict[str, Any]) -> dict[str, Any]:
    dsn = input["dsn"]
    charged = await wf.step(RENAMED["charge"], charge, dsn, wf, input["amount"], input.get("pause", 0.0),
                            queue=STEP_QUEUE, lock_key=f"acct:{input['account']}")
    after = await wf.step("after", probe, dsn, wf, "after", input.get("pause_after", 0.0))
    return {"charged": charged, "after": after, "run_pid": os.getpid()}


@workflow("t.sj.locked", queue=QUEUE)
async def locked(wf: Workflow, input: dict[str, Any]) -> int:
    options: dict[str, Any] = {"queue": STEP_QUEUE}
    if input.get("lock_key"):
        options["lock_key"] = input["lock_key"]
    return await wf.step("spanned", spanned, input["dsn"], wf, input["hold"], **options)


@workflow("t.sj.flaky", queue=QUEUE)
async def retried(wf: Workflow, input: dict[str, Any]) -> dict[str, Any]:
    try:
        value = await wf.step("flaky", flaky, input["dsn"], wf, input["failures"], queue=STEP_QUEUE,
                              max_attempts=input["attempts"], backoff=lambda attempt: 0.2 * attempt)
    except StepFailed as failed:
        return {"failed": failed.error, "name": failed.name}
    return {"value": value}


FAILURES_LEFT: dict[str, int] = {}


def fails_at_first(run: str) -> str:
    """Fails while `FAILURES_LEFT[run]` > 0 (no database: for the in-memory harness)."""
    if FAILURES_LEFT.get(run, 0) > 0:
        FAILURES_LEFT[run] -= 1
        raise RuntimeError("not yet")
    return "charged"


@workflow("t.sj.inline", queue=QUEUE)
async def inline_in_tests(wf: Workflow, input: dict[str, Any]) -> str:
    return await wf.step("charge", fails_at_first, input["run"], queue=STEP_QUEUE, lock_key="acct:1",
                         max_attempts=3, backoff=lambda attempt: 10.0)


@workflow("t.sj.sync", queue=QUEUE)
def sync_flow(wf: Any, input: dict[str, Any]) -> dict[str, Any]:
    first = wf.step("first", lambda n: n + 1, input["n"])
    doubled = wf.step("double", lambda n: (n * 2, os.getpid()), first, queue=STEP_QUEUE, lock_key="sync")
    return {"first": first, "doubled": doubled[0]}


@workflow("t.sj.side_by_side", queue=QUEUE)
async def side_by_side(wf: Workflow, input: dict[str, Any]) -> list[Any]:
    dsn = input["dsn"]
    return await wf.gather(wf.call("inline", probe, dsn, wf, "inline"),
                           wf.call("away-1", probe, dsn, wf, "away-1", queue=STEP_QUEUE),
                           wf.call("away-2", probe, dsn, wf, "away-2", queue=STEP_QUEUE, lock_key="side"))
