"""Pipelines of the limit-through-a-fenced-attempt tests (tests/flow/test_limits_through_faults.py),
loaded by worker subprocesses through DL_PIPELINE_MODULES next to tests.support.pipelines.

`test.sync_file_chunks` is a plain (sync) function, so it runs in a worker thread that nothing can
interrupt: it records every chunk it works, with the wall clock, as a line of a file of its own
(`args.path`; the tests and the workers share the machine's clock), never through the database, so
what it did while its worker was cut off from the database is still seen. With `args.poll` it looks
at `ctx.stop_requested` before each chunk and returns when asked (what docs/patterns.md asks of
long sync pipelines); without it, it ignores the stop."""

from __future__ import annotations

import os
import time

from dataloader import JobContext, pipeline


def _line(path: str, *fields: object) -> None:
    with open(path, "a") as f:
        f.write(" ".join(str(x) for x in fields) + "\n")


@pipeline("test.sync_file_chunks", max_attempts=5)
def sync_file_chunks(ctx: JobContext) -> None:
    path = str(ctx.args["path"])
    me = (ctx.job_id, ctx.attempt, os.getpid())
    _line(path, "start", *me, time.time())
    for i in range(int(ctx.args.get("chunks", 10))):
        if ctx.args.get("poll") and ctx.stop_requested:
            _line(path, "stopped", *me, time.time(), ctx.stop_reason)
            return
        time.sleep(float(ctx.args.get("chunk_sec", 0.1)))
        _line(path, "chunk", *me, time.time(), i)
    _line(path, "end", *me, time.time())
