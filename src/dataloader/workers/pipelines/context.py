"""What a pipeline receives: the job, a progress reporter and the stop signal."""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Awaitable, Callable
from typing import Any, Literal

from dataloader.workers.pipelines.errors import JobStopped

StopReason = Literal["cancel", "shutdown", "lease_lost"]


class JobContext:
    """Passed to every pipeline call.

    Async pipelines call `await ctx.progress({...})`; sync pipelines (run in a thread) call
    `ctx.progress_sync({...})`. Long loops that do not yield should poll `ctx.stop_requested` or
    call `ctx.raise_if_stopped()`.
    """

    def __init__(
        self,
        *,
        job_id: uuid.UUID,
        queue: str,
        task: str,
        args: dict[str, Any],
        attempt: int,
        max_attempts: int,
        lock_key: str,
        partition_key: str,
        report_progress: Callable[[dict[str, Any]], Awaitable[None]],
        log: logging.Logger,
        loop: asyncio.AbstractEventLoop,
    ) -> None:
        self.job_id = job_id
        self.queue = queue
        self.task = task
        self.args = args
        self.attempt = attempt
        self.max_attempts = max_attempts
        self.lock_key = lock_key
        self.partition_key = partition_key
        self.log = log
        self._report_progress = report_progress
        self._loop = loop
        self.stop_reason: StopReason | None = None
        # Whether the pipeline was told of the stop (read stop_requested as true or called
        # raise_if_stopped after it was set). A pipeline that returns after seeing it may have
        # stopped early, so the stop decides the outcome; one that never looked finished its work.
        self.stop_seen = False

    @property
    def stop_requested(self) -> bool:
        if self.stop_reason is not None:
            self.stop_seen = True
            return True
        return False

    def raise_if_stopped(self) -> None:
        if self.stop_reason is not None:
            self.stop_seen = True
            raise JobStopped(self.stop_reason)

    async def progress(self, data: dict[str, Any]) -> None:
        """Store `data` as the job's progress (replaces the previous value)."""
        if not isinstance(data, dict):
            raise TypeError("progress must be a dict")
        await self._report_progress(data)

    def progress_sync(self, data: dict[str, Any]) -> None:
        """`progress` for pipelines running in a worker thread."""
        asyncio.run_coroutine_threadsafe(self.progress(data), self._loop).result()
