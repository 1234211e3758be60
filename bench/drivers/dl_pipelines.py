"""Pipelines the benchmark's dataloader workers load through DL_PIPELINE_MODULES."""

from __future__ import annotations

import time

from bench import marks
from dataloader import JobContext, pipeline


@pipeline("bench.mark")
async def mark(ctx: JobContext) -> None:
    """Records when the handler started and ended (see bench/marks.py); does nothing else."""
    started = time.time()
    marks.record(str(ctx.args["k"]), started)
