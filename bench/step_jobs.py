"""What a step job costs against a step inside its run's job: N runs of a one-step workflow each way,
on one in-process node (`python -m bench.step_jobs [N] [inline]`), on the embedded PostgreSQL 18 (or
BENCH_DSN). Reports runs/s and the time per run; the difference per run is the step job's cost (its
insert with the record, its claim and finish, its replay of the run up to its position, the run's
wake-up and second replay)."""

from __future__ import annotations

import asyncio
import sys
import time

from bench import pg
from dataloader import App, Queue, Settings, workflow


async def _noop(n: int) -> int:
    return n


@workflow("bench.inline_step", queue="bench-runs")
async def inline_step(wf, n):
    return await wf.step("work", _noop, n)


@workflow("bench.step_job", queue="bench-runs")
async def step_job(wf, n):
    return await wf.step("work", _noop, n, queue="bench-steps")


async def _drain(app: App, name: str, count: int) -> float:
    started = time.perf_counter()
    ids = [await app.workflows.start(name, i) for i in range(count)]
    for run_id in ids:
        await app.workflows.result(run_id, timeout=600)
    return time.perf_counter() - started


async def main(count: int, names: tuple[str, ...]) -> None:
    server = pg.start_server()
    try:
        async with pg.fresh_database(server, "step_jobs") as dsn:
            settings = Settings(db_dsn=dsn, workers=[Queue("bench-runs", 16), Queue("bench-steps", 16)])
            async with App(settings) as app, app.running():
                for name in names:  # warm up
                    await _drain(app, name, 20)
                for name in names * 2:
                    took = await _drain(app, name, count)
                    print(f"{name:20s} {count} runs in {took:.2f} s: {count / took:7.1f} runs/s, "
                          f"{took / count * 1e3:.2f} ms a run", flush=True)
    finally:
        server.stop()


if __name__ == "__main__":
    # `inline`: the inline step alone (runs on code without step jobs too, to compare the two)
    only_inline = "inline" in sys.argv[2:]
    asyncio.run(main(int(sys.argv[1]) if len(sys.argv) > 1 else 500,
                     ("bench.inline_step",) if only_inline else ("bench.inline_step", "bench.step_job")))
