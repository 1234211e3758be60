"""Diagnostic pipelines that every worker has: dl.noop, dl.sleep, dl.fail.

Plain functions listed in `BUILTIN_PIPELINES`; the registry registers them when it loads the
pipeline modules (this module does not import the registry, so the two cannot import each other).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any

from dataloader.exceptions import FatalError
from dataloader.workers.pipelines.context import JobContext


async def noop(ctx: JobContext) -> None:
    """Succeeds at once."""


async def sleep(ctx: JobContext) -> AsyncIterator[None]:
    """Sleeps `seconds` (default 1) in `chunks` parts (default 10), reporting progress after each
    part; a cancel or shutdown stops it at the next part."""
    seconds = float(ctx.args.get("seconds", 1))
    chunks = int(ctx.args.get("chunks", 10))
    if seconds < 0 or chunks < 1:
        raise FatalError("dl.sleep needs seconds >= 0 and chunks >= 1")
    for done in range(1, chunks + 1):
        await asyncio.sleep(seconds / chunks)
        await ctx.progress({"chunks_done": done, "chunks_total": chunks})
        yield


async def fail(ctx: JobContext) -> None:
    """Raises: a FatalError (no retries) when `fatal` is true, else a RuntimeError (retried)."""
    message = str(ctx.args.get("message", "dl.fail was asked to fail"))
    if ctx.args.get("fatal"):
        raise FatalError(message)
    raise RuntimeError(message)


BUILTIN_PIPELINES: dict[str, Callable[..., Any]] = {"dl.noop": noop, "dl.sleep": sleep, "dl.fail": fail}
