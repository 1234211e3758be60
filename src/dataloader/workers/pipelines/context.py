"""What a pipeline receives: the job, a progress reporter, the stop signal, and a transaction
that finishes the job when it commits."""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from typing import TYPE_CHECKING, Any, Literal

from dataloader.exceptions import JobStopped

if TYPE_CHECKING:
    import asyncpg

    from dataloader.model.chain import Stage, Then

# "timeout": the attempt ran past its run-time limit (docs/patterns.md "Run-time limits").
StopReason = Literal["cancel", "shutdown", "lease_lost", "timeout"]


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
        open_transaction: Callable[..., AbstractAsyncContextManager[asyncpg.Connection]] | None = None,
        db: asyncpg.Pool | None = None,
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
        self._open_transaction = open_transaction
        # The engine's pool, for reads a pipeline makes before its ctx.transaction() (the built-in
        # process step reads its process here). None outside the engine (testing.run_inline).
        self.db = db
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

    def transaction(self, *, then: Then | Stage | None = None) -> AbstractAsyncContextManager[asyncpg.Connection]:
        """A connection (from the App's pool) in a transaction whose COMMIT also finishes this job
        as `succeeded`, journal row included: the pipeline's writes and the job's end land
        together or not at all.

            async with ctx.transaction() as conn:
                await conn.execute("INSERT INTO invoices (order_id) VALUES ($1)", ctx.args["order"])

        The finish is fenced like every other: if the attempt was taken away meanwhile (its lease
        expired and the reaper handed the job back), the commit is refused, everything in the block
        rolls back and `AttemptFenced` is raised (the job runs again elsewhere). An exception in the
        block rolls back too, and the attempt ends as that exception says. Once per attempt, in
        async pipelines; after the block the job has ended: anything the pipeline returns or
        raises afterwards is not stored, and the lock_key is already released.

        `then`: the stages to enqueue next, committed in the same transaction (a `Then` returned
        after the block cannot be: the job has already ended). Without it, the stages planned at
        enqueue (`then=`) are enqueued, without an `input` (there is no result yet)."""
        if self._open_transaction is None:
            raise RuntimeError("ctx.transaction() needs the engine's database; this context has none "
                               "(dataloader.testing.run_inline: test such a pipeline with drain())")
        return self._open_transaction(then) if then is not None else self._open_transaction()

    def progress_sync(self, data: dict[str, Any]) -> None:
        """`progress` for pipelines running in a worker thread."""
        asyncio.run_coroutine_threadsafe(self.progress(data), self._loop).result()
