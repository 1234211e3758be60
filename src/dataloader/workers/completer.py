"""The completer: how attempts' finishes reach the database, in batches.

An attempt that ends submits a `FinishRequest` and awaits its result. The queue worker's next step
writes every pending finish in one statement (`finish_jobs.sql`) on the control connection, in the
same transaction as that step's heartbeat and claim, and each finish releases its lock_key there
only if the ledger says this job holds it. The futures are resolved only after the step
committed: an attempt learns its outcome once it is durable. A step that fails leaves its batch
pending, and the next step writes it again, so no result is lost.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import replace

from dataloader import metrics
from dataloader.model.hold import HoldRule
from dataloader.storage.owned_connection import OwnedConnection
from dataloader.storage.queue_connection import FinishRequest, FinishResult, QueueConnection
from dataloader.workers.attempt import Attempt
from dataloader.workers.control import LockLedger

# Finishes written by one statement at most.
MAX_FINISH_BATCH = 256

log = logging.getLogger("dataloader.worker")


class _Later:
    """The answer of `submit_later`: a callback in a future's place (resolve() treats both alike)."""

    __slots__ = ("_done", "_on_durable")

    def __init__(self, on_durable: Callable[[FinishResult], None]) -> None:
        self._on_durable = on_durable
        self._done = False

    def done(self) -> bool:
        return self._done

    def set_result(self, result: FinishResult) -> None:
        self._done = True
        try:
            self._on_durable(result)
        except Exception:
            # One attempt's bookkeeping must not keep the other finishes of the batch unanswered.
            log.exception("finishing an attempt failed after its finish committed")


_Pending = tuple[FinishRequest, "asyncio.Future[FinishResult] | _Later"]


class Completer:
    """The queue of finish requests of one queue worker, its batch flush and the resolution of
    the requests' futures after commit."""

    def __init__(self, queue: str, running: Mapping[uuid.UUID, Attempt], *,
                 on_submit: Callable[[], None], on_requeued: Callable[[float], None],
                 hold: HoldRule | None = None) -> None:
        """`on_submit`: wake the worker's loop. `on_requeued(delay)`: a finish put its job back to
        run `delay` seconds from now (a retry): look for work then."""
        self.queue = queue
        self.hold = hold  # the queue's held-jobs rule (dataloader/model/hold.py)
        self._running = running
        self._on_submit = on_submit
        self._on_requeued = on_requeued
        self._pending: list[_Pending] = []
        self._flushed: tuple[list[_Pending], list[FinishRequest], dict[uuid.UUID, FinishResult]] | None = None

    def __len__(self) -> int:
        """Finishes submitted and not yet durable."""
        return len(self._pending)

    def __bool__(self) -> bool:
        return bool(self._pending)

    def pending_job_ids(self) -> set[uuid.UUID]:
        return {request.job_id for request, _ in self._pending}

    async def submit(self, request: FinishRequest) -> FinishResult:
        """Called by an attempt: returns once the finish has committed."""
        future: asyncio.Future[FinishResult] = asyncio.get_running_loop().create_future()
        self._pending.append((request, future))
        self._on_submit()
        return await future

    def submit_later(self, request: FinishRequest, on_durable: Callable[[FinishResult], None]) -> None:
        """`submit` without a future: `on_durable(result)` is called once the finish has committed
        (an attempt that ended in its first step, outside any task: Attempt.start)."""
        self._pending.append((request, _Later(on_durable)))
        self._on_submit()

    def begin_step(self) -> None:
        """Forget a batch written by a step that did not commit: it is still pending."""
        self._flushed = None

    async def flush(self, conn: OwnedConnection, ledger: LockLedger) -> None:
        """Write the pending finishes (inside the step's transaction). A finish unlocks its key
        only if the ledger says its job holds it; the ledger forgets the released locks at once,
        so a claim later in this step may take these keys again. (If the step fails, the
        connection and all its locks are dropped anyway.)"""
        batch, requests = self.next_batch(ledger)
        started = time.perf_counter()
        queue_conn = QueueConnection(conn)
        results = await queue_conn.finish(requests, self.hold)
        metrics.FINISH_SECONDS.labels(self.queue).observe(time.perf_counter() - started)
        await self.written(conn, ledger, batch, requests, results)

    def next_batch(self, ledger: LockLedger) -> tuple[list[_Pending], list[FinishRequest]]:
        """The next batch to write, each request unlocking its key only if the ledger says its job
        holds it."""
        batch = self._pending[:MAX_FINISH_BATCH]
        requests = []
        for request, _ in batch:
            owns_lock = ledger.holder(self._lock_hash_of(request)) == request.job_id
            requests.append(_with_unlock(request, request.unlock and owns_lock))
        return batch, requests

    async def written(self, conn: OwnedConnection, ledger: LockLedger, batch: list[_Pending],
                      requests: list[FinishRequest], results: dict[uuid.UUID, FinishResult]) -> None:
        """A statement wrote `batch`: the ledger forgets the locks it released (waking the jobs we
        held back behind them), and `resolve` answers the attempts once the step has committed."""
        parked = []
        for request in requests:
            if request.unlock:
                parked.extend(ledger.release(self._lock_hash_of(request)))
        if parked:
            await QueueConnection(conn).wake_parked(parked)
        self._flushed = (batch, requests, results)

    def resolve(self) -> None:
        """After the step committed: the finishes are durable, tell their attempts."""
        if self._flushed is None:
            return
        batch, requests, results = self._flushed
        self._flushed = None
        del self._pending[:len(batch)]
        for request, (_, future) in zip(requests, batch, strict=True):
            result = results[request.job_id]
            if result.status == "queued" and request.delay_sec > 0:
                self._on_requeued(request.delay_sec)
            if not future.done():
                future.set_result(result)

    def _lock_hash_of(self, request: FinishRequest) -> int | None:
        attempt = self._running.get(request.job_id)
        return attempt.job.lock_hash if attempt is not None else request.lock_hash


def _with_unlock(request: FinishRequest, unlock: bool) -> FinishRequest:
    return request if request.unlock == unlock else replace(request, unlock=unlock)
