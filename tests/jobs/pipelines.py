"""Pipelines of the queue-pattern tests (chains, restartable jobs), loaded in-process and by worker
subprocesses (DL_PIPELINE_MODULES=tests.support.pipelines,tests.jobs.pipelines). Each run is
recorded in `pattern_runs`, so a test counts executions across processes and kills."""

from __future__ import annotations

import asyncio
import os

import asyncpg

from dataloader import JobContext, Stage, Then, pipeline

RUNS_DDL = """
CREATE TABLE IF NOT EXISTS pattern_runs (
    id bigserial PRIMARY KEY,
    job_id uuid NOT NULL,
    task text NOT NULL,
    args jsonb NOT NULL,
    attempt int NOT NULL,
    pid int NOT NULL,
    started_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    ended_at timestamptz
)
"""


async def _record(ctx: JobContext, seconds: float = 0.0) -> None:
    conn = await asyncpg.connect(ctx.args["dsn"])
    try:
        run_id = await conn.fetchval(
            "INSERT INTO pattern_runs (job_id, task, args, attempt, pid) VALUES ($1, $2, $3::jsonb, $4, $5) "
            "RETURNING id", ctx.job_id, ctx.task, __import__("json").dumps(ctx.args), ctx.attempt, os.getpid())
        if seconds:
            await asyncio.sleep(seconds)
        await conn.execute("UPDATE pattern_runs SET ended_at = clock_timestamp() WHERE id = $1", run_id)
    finally:
        await conn.close()


@pipeline("pattern.step")
async def step(ctx: JobContext) -> dict:
    """Records its run, sleeps `seconds`, returns {"n": input.n + 1} (or 1)."""
    await _record(ctx, float(ctx.args.get("seconds", 0)))
    previous = ctx.args.get("input") or {}
    return {"n": int(previous.get("n", 0)) + 1}


@pipeline("pattern.fan_out")
async def fan_out(ctx: JobContext) -> Then:
    await _record(ctx)
    parts = int(ctx.args["parts"])
    return Then(*(Stage("pattern.step", {"dsn": ctx.args["dsn"], "part": i}, queue=ctx.args.get("to"))
                  for i in range(parts)), result={"parts": parts})


@pipeline("pattern.fail", max_attempts=1)
async def fail(ctx: JobContext) -> None:
    await _record(ctx)
    raise RuntimeError("stage failed")


@pipeline("pattern.in_transaction")
async def in_transaction(ctx: JobContext) -> None:
    """Writes a row and finishes in one transaction, enqueuing pattern.step next in it; with
    `rollback`, raises inside the block."""
    async with ctx.transaction(then=Stage("pattern.step", {"dsn": ctx.args["dsn"]})) as conn:
        await conn.execute("INSERT INTO pattern_runs (job_id, task, args, attempt, pid) "
                           "VALUES ($1, $2, '{}'::jsonb, $3, $4)", ctx.job_id, ctx.task, ctx.attempt, os.getpid())
        if ctx.args.get("rollback"):
            raise RuntimeError("rolled back")
