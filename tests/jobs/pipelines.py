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


def _fan_in_then(ctx: JobContext) -> Then:
    """Members by `kinds` (step: succeeds after `seconds`; fail: fails; later: due in an hour, to be
    canceled or deleted while queued), joined by pattern.join with `join_args`."""
    dsn = ctx.args["dsn"]
    members = []
    for i, kind in enumerate(ctx.args["kinds"]):
        task = {"step": "pattern.step", "fail": "pattern.fail", "later": "pattern.step"}[kind]
        members.append(Stage(task, {"dsn": dsn, "part": i, "seconds": ctx.args.get("seconds", 0)},
                             delay_sec=3600.0 if kind == "later" else 0.0))
    return Then(*members, join=Stage("pattern.join", {"dsn": dsn, **ctx.args.get("join_args", {})}),
                result={"members": len(members)})


@pipeline("pattern.fan_in")
async def fan_in(ctx: JobContext) -> Then:
    await _record(ctx)
    return _fan_in_then(ctx)


@pipeline("pattern.fan_in_in_transaction")
async def fan_in_in_transaction(ctx: JobContext) -> None:
    """The same fan-in, enqueued by ctx.transaction() with the job's own write."""
    async with ctx.transaction(then=_fan_in_then(ctx)) as conn:
        await conn.execute("INSERT INTO pattern_runs (job_id, task, args, attempt, pid) "
                           "VALUES ($1, $2, '{}'::jsonb, $3, $4)", ctx.job_id, ctx.task, ctx.attempt, os.getpid())


@pipeline("pattern.join")
async def join(ctx: JobContext) -> dict:
    """Records its run (its args hold the members' outcomes as `inputs`)."""
    await _record(ctx)
    inputs = ctx.args.get("inputs") or []
    return {"succeeded": sum(1 for i in inputs if i["status"] == "succeeded"), "members": len(inputs)}
