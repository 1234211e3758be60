"""What a step job costs against a step inside its run's job: N runs of a one-step workflow each way,
on one in-process node (`python -m bench.step_jobs [N] [inline]`), on the embedded PostgreSQL 18 (or
BENCH_DSN). Reports runs/s and the time per run; the difference per run is the step job's cost (its
insert with the record, its claim and finish, its replay of the run up to its position, the run's
wake-up and second replay)."""

from __future__ import annotations

import asyncio
import sys
import time

import asyncpg

from bench import pg
from dataloader import App, Queue, Settings, workflow
from dataloader.storage import migrate


async def _noop(n: int) -> int:
    return n


@workflow("bench.inline_step", queue="bench-runs")
async def inline_step(wf, n):
    return await wf.step("work", _noop, n)


@workflow("bench.step_job", queue="bench-runs")
async def step_job(wf, n):
    return await wf.step("work", _noop, n, queue="bench-steps")


async def _drain(app: App, dsn: str, name: str, count: int) -> float:
    """Seconds from the first start to the last run's end (read from dl_jobs every 5 ms: polling
    `result` per run would measure its back-off instead)."""
    conn = await asyncpg.connect(dsn)
    try:
        task = f"workflow:{name}"
        before = await conn.fetchval("SELECT count(*) FROM dl_jobs WHERE task = $1 AND status = 'succeeded'", task)
        started = time.perf_counter()
        for first in range(0, count, 50):  # started 50 at a time, as producers side by side would
            await asyncio.gather(*(app.workflows.start(name, i) for i in range(first, min(first + 50, count))))
        done = before
        while done < before + count:
            await asyncio.sleep(0.005)
            done = await conn.fetchval("SELECT count(*) FROM dl_jobs WHERE task = $1 AND status = 'succeeded'", task)
        return time.perf_counter() - started
    finally:
        await conn.close()


async def main(count: int, names: tuple[str, ...]) -> None:
    server = pg.start_server()
    try:
        async with pg.fresh_database(server, "step_jobs") as dsn:
            await migrate.upgrade(dsn)
            workers = [Queue("bench-runs", 16), Queue("bench-steps", 16)]
            settings = Settings(db_dsn=dsn, log_level="WARNING", workers=workers)
            async with App(settings) as app, app.running():
                for name in names:  # warm up
                    await _drain(app, dsn, name, 20)
                for name in names * 2:
                    took = await _drain(app, dsn, name, count)
                    print(f"{name:20s} {count} runs in {took:.2f} s: {count / took:7.1f} runs/s, "
                          f"{took / count * 1e3:.2f} ms a run", flush=True)
    finally:
        server.stop()


if __name__ == "__main__":
    # `inline`: the inline step alone (runs on code without step jobs too, to compare the two)
    only_inline = "inline" in sys.argv[2:]
    asyncio.run(main(int(sys.argv[1]) if len(sys.argv) > 1 else 500,
                     ("bench.inline_step",) if only_inline else ("bench.inline_step", "bench.step_job")))
