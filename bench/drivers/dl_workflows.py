"""The workflows of `python -m bench workflows` (bench/workflows.py), loaded by the dataloader
worker through DL_PIPELINE_MODULES and by bench/drivers/dl_workflow_driver.py to start them.
The same shapes as bench/peers/dbos_driver.py's: `bench.three` (3 no-op steps), `bench.steps`
(input = S no-op steps), `bench.slow` (S steps, each appending `run_id step pid` to
BENCH_MARKS_FILE with one os.write, then sleeping 20 ms), `bench.child` (1 no-op step),
`bench.fanout` (input = N children of `bench.child`, joined with one gather). Steps are async
functions (dataloader's native form); DBOS's are plain defs (its native form)."""

from __future__ import annotations

import asyncio
import os

from dataloader import workflow

QUEUE = "bench"
SLOW_STEP_SEC = 0.02


async def noop(i: int) -> int:
    return i


async def slow_step(run_id: str, i: int) -> int:
    path = os.environ.get("BENCH_MARKS_FILE")
    if path:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, f"{run_id} {i} {os.getpid()}\n".encode())
        finally:
            os.close(fd)
    await asyncio.sleep(SLOW_STEP_SEC)
    return i


@workflow("bench.three", queue=QUEUE)
async def three(wf, _input):
    return await wf.step("s0", noop, 0) + await wf.step("s1", noop, 1) + await wf.step("s2", noop, 2)


@workflow("bench.steps", queue=QUEUE)
async def steps(wf, count):
    total = 0
    for i in range(count):
        total += await wf.step(f"s{i}", noop, i)
    return total


@workflow("bench.slow", queue=QUEUE)
async def slow(wf, count):
    total = 0
    for i in range(count):
        total += await wf.step(f"s{i}", slow_step, str(wf.run_id), i)
    return total


@workflow("bench.child", queue=QUEUE)
async def child(wf, i):
    return await wf.step("s0", noop, i)


@workflow("bench.fanout", queue=QUEUE)
async def fanout(wf, count):
    return sum(await wf.gather(*(wf.child("bench.child", i) for i in range(count))))
