"""The bulk operation runner: every node runs one. It takes the oldest running operation
whose lease has expired (never taken, or its runner died: kill -9, a lost network) with a
compare-and-set that bumps the lease epoch, then works it in small batches, each one transaction
that re-checks (owner, epoch, state) under the operation's row lock, changes the batch's jobs with
the single-job compare-and-set, and advances the cursor and counts — so a job is never handled
twice, even across a takeover, and a pause or cancel lands between batches.

It does not poll: a `dl_operations` NOTIFY (an operation started or resumed, or handed back by a
stopping node) wakes it, and while another runner holds a running operation it sleeps until that
lease runs out, to take it over if it was not renewed (its runner died). `period_sec` is only the
backstop for a notification lost while its listener was away (default 60 s: an idle node looks
once a minute, not every 5 s).

A batch that fails (a lock timeout behind a pipeline's transaction, a lost connection) rolled back
whole; the runner keeps its lease and tries again after a pause. An error that cannot pass (a
filter that no longer parses) fails the operation, with the error in its row and audit trail. On
stop the runner hands its operation back at once, so another node continues without waiting for
the lease to run out.
"""

from __future__ import annotations

import asyncio
import logging
import time

from pydantic import Field, ValidationError

from dataloader import metrics
from dataloader.config import Settings
from dataloader.exceptions import InvalidJobRequest
from dataloader.jobs.search import parse_filter
from dataloader.maintenance.periodic import PeriodicService, PeriodicSettings
from dataloader.maintenance.service import Scope
from dataloader.model.operation import PROCESS_KINDS, WORKFLOW_KINDS
from dataloader.model.principal import SYSTEM, acting_as
from dataloader.processes.restart import bulk_restarter
from dataloader.storage.notifier import Notifier
from dataloader.storage.operation_repository import OperationRepository
from dataloader.workflows.bulk import bulk_run_changer

log = logging.getLogger("dataloader.operations.runner")

CHANNEL = "dl_operations"
# Looking again right at the end of a lease would race the database clock and find it not quite
# expired; a little after, it is.
LEASE_END_MARGIN_SEC = 0.05
# After a look that failed (the database unreachable): the next one, not the whole backstop period.
FAILED_LOOK_RETRY_SEC = 5.0


class OperationRunnerSettings(PeriodicSettings):
    # The backstop look for a lost notification; notifications and lease ends wake it otherwise.
    period_sec: float = Field(default=60, gt=0, le=3600, description="DL_OPERATIONS_PERIOD_SEC")
    lease_sec: float = Field(default=30, ge=0.5, le=3600, description="DL_OPERATIONS_LEASE_SEC")
    # Seconds between batches: 0 runs them back to back (each is short and commits on its own).
    batch_pause_sec: float = Field(default=0, ge=0, le=60)
    # After a failed batch (a lock timeout, a lost connection): wait, keep the lease, try again.
    retry_pause_sec: float = Field(default=1, ge=0, le=60)

    @classmethod
    def from_settings(cls, settings: Settings) -> OperationRunnerSettings:
        return cls(period_sec=settings.operations_period_sec, lease_sec=settings.operations_lease_sec,
                   batch_pause_sec=settings.operations_batch_pause_sec)


class OperationRunner(PeriodicService):
    name = "operations"
    scope = Scope.EVERY_NODE
    channel = CHANNEL

    settings: OperationRunnerSettings

    def __init__(self, repo: OperationRepository, settings: OperationRunnerSettings, *, owner: str,
                 default_lease_ttl_sec: int = 60, max_args_bytes: int = 256 * 1024, dsn: str | None = None,
                 notifier: Notifier | None = None, **kwargs: object) -> None:
        """`notifier` (or, run alone, `dsn`): where started and resumed operations are heard
        (neither: wake on time only)."""
        super().__init__(settings, dsn=dsn, notifier=notifier, **kwargs)  # type: ignore[arg-type]
        self.repo = repo
        self.owner = owner
        self.restart_process = bulk_restarter(default_lease_ttl_sec)
        self.change_run = bulk_run_changer(max_args_bytes=max_args_bytes, default_lease_ttl_sec=default_lease_ttl_sec)
        self._lease_ends_in: float | None = None  # of another runner's operation, at the last look

    def next_delay(self) -> float:
        """Until the backstop, or sooner: the end of another runner's lease (a takeover if it is not
        renewed by then), or a retry after a failed look."""
        delay = super().next_delay()
        if not self.last_tick_ok:
            delay = min(delay, FAILED_LOOK_RETRY_SEC)
        ends_in = self._lease_ends_in
        if ends_in is not None:
            # <= 0: an expired lease whose row a batch in flight holds; look again after a pause.
            delay = min(delay, ends_in + LEASE_END_MARGIN_SEC if ends_in > 0 else self.settings.retry_pause_sec)
        return delay

    async def tick(self) -> int:
        """Take operations and work them until none is left to take; returns the batches run. The
        runner acts as the node (SYSTEM): the changes it makes for an operation are the operation's,
        recorded by its `operation.start` row and its own journal, not one audit row per run."""
        with acting_as(SYSTEM):
            return await self._tick()

    async def _tick(self) -> int:
        self._lease_ends_in = None
        batches = 0
        while not self.stopping.is_set():
            op = await self.repo.claim(self.owner, self.settings.lease_sec)
            if op is None:
                self._lease_ends_in = await self.repo.next_lease_expiry_in()
                return batches
            if op["previous_owner"] is not None:
                metrics.OPERATION_TAKEOVERS.inc()
                log.warning("took over a bulk operation whose runner stopped renewing its lease",
                            extra={"operation_id": str(op["operation_id"]), "previous_owner": op["previous_owner"],
                                   "done": op["done"], "total": op["total"]})
            batches += await self._work(op["operation_id"], op["kind"], op["lease_epoch"])
        return batches

    async def _work(self, operation_id, kind: str, epoch: int) -> int:
        batches = 0
        try:
            while not self.stopping.is_set():
                started = time.perf_counter()
                try:
                    if kind in PROCESS_KINDS:
                        result = await self.repo.run_process_batch(operation_id, self.owner, epoch,
                                                                   self.settings.lease_sec, self.restart_process)
                    elif kind in WORKFLOW_KINDS:
                        result = await self.repo.run_workflow_batch(operation_id, self.owner, epoch,
                                                                    self.settings.lease_sec, self.change_run)
                    else:
                        result = await self.repo.run_batch(operation_id, self.owner, epoch, self.settings.lease_sec,
                                                           parse_filter)
                except asyncio.CancelledError:
                    raise
                except (InvalidJobRequest, ValidationError) as exc:  # its filter can never run: end it, say why
                    await self.repo.fail(operation_id, self.owner, epoch, str(exc))
                    log.error("bulk operation failed", extra={"operation_id": str(operation_id), "error": str(exc)})
                    return batches
                except Exception as exc:
                    self.report_failure(exc, "bulk operation batch failed; retrying", logger=log,
                                        unavailable="bulk operation batch failed; retrying",
                                        extra={"operation_id": str(operation_id)})
                    await self.clock.wait(self.stopping, self.settings.retry_pause_sec)
                    continue
                finally:
                    metrics.OPERATION_BATCH_SECONDS.labels(kind).observe(time.perf_counter() - started)
                if result.row is None:  # paused, canceled, or taken over: stop touching it
                    return batches
                batches += 1
                metrics.OPERATION_JOBS.labels(kind, "changed").inc(result.changed)
                metrics.OPERATION_JOBS.labels(kind, "skipped").inc(result.examined - result.changed - result.failed)
                if result.failed:
                    metrics.OPERATION_JOBS.labels(kind, "failed").inc(result.failed)
                if result.finished:
                    log.info("bulk operation finished", extra={
                        "operation_id": str(operation_id), "kind": kind, "done": result.row["done"],
                        "changed": result.row["changed"], "total": result.row["total"]})
                    return batches
                if self.settings.batch_pause_sec:
                    await self.clock.wait(self.stopping, self.settings.batch_pause_sec)
        finally:
            if self.stopping.is_set():
                try:
                    await self.repo.release(operation_id, self.owner, epoch)
                except Exception:  # the lease runs out instead
                    log.warning("could not hand a bulk operation back on stop",
                                extra={"operation_id": str(operation_id)})
        return batches
