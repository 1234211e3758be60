"""Self-fencing of a queue worker's attempts by time.

Fencing in the database (the attempt number) refuses an old holder's writes once the reaper took
its job back, but it cannot stop the old holder's pipeline: while the database is unreachable
(a primary failing over to its standby, a restart longer than a lease), no heartbeat tells the
worker its lease is gone, and the reaper on the database that comes back hands the job's lock_key
to another node. So the worker keeps, per attempt, when its lease was last renewed by its own
clock, and stops the attempt (`lease_lost`) a margin before the lease can run out: then another
holder of the key can only start after this one was stopped.

The lease is counted by the database from its `now()` (the start of the transaction that claimed
or heartbeated), which comes after the worker sent that step; so the step's start on the
worker's monotonic clock is a safe lower bound of the lease's start.
"""

from __future__ import annotations

import asyncio
import logging
import math
import uuid
from collections.abc import Iterable, Mapping

from dataloader import metrics
from dataloader.model.clock import Clock
from dataloader.workers.attempt import Attempt

log = logging.getLogger("dataloader.worker")

# The margin is a fifth of the lease, and never more than this: it covers the pipeline's
# cancellation and a difference between the clocks of a primary and the standby promoted after it.
MAX_FENCE_MARGIN_SEC = 2.0
# A guard whose attempts are not overdue yet looks again no sooner than this (a clock that stands
# still in a test must not spin the loop).
MIN_RECHECK_SEC = 0.01


def fence_margin(lease_ttl_sec: float) -> float:
    """How long before its lease could run out an attempt that was not renewed is stopped."""
    return min(lease_ttl_sec / 5, MAX_FENCE_MARGIN_SEC)


def fence_at(renewed_at: float, lease_ttl_sec: float) -> float:
    """When (monotonic) an attempt whose lease was last written by a step that started at
    `renewed_at` must be stopped, if no later heartbeat renews it."""
    return renewed_at + lease_ttl_sec - fence_margin(lease_ttl_sec)


def overdue(attempts: Iterable[Attempt], now: float) -> list[Attempt]:
    """The attempts past their fence time (a fenced one has none left: `math.inf`)."""
    return [a for a in attempts if a.fence_at <= now]


class LeaseGuard:
    """One timer per queue worker, armed at the earliest fence time of its running attempts. It is
    a loop callback, not part of the worker's loop: that loop may hang in a statement to a database
    that stopped answering, which is exactly when the guard must act."""

    def __init__(self, queue: str, running: Mapping[uuid.UUID, Attempt], clock: Clock) -> None:
        self.queue = queue
        self._running = running
        self._clock = clock
        self._handle: asyncio.TimerHandle | None = None
        self._armed_at: float | None = None

    def claimed(self, attempt: Attempt, step_started: float) -> None:
        """`attempt`'s lease was written by the step that started at `step_started`."""
        attempt.fence_at = at = fence_at(step_started, attempt.job.lease_ttl_sec)
        if self._armed_at is None or at < self._armed_at:
            self._arm(at)

    def renewed(self, attempts: Iterable[Attempt], step_started: float) -> None:
        """A heartbeat of the step that started at `step_started` renewed these attempts' leases."""
        for attempt in attempts:
            if attempt.fence_at < math.inf:  # not fenced already
                attempt.fence_at = fence_at(step_started, attempt.job.lease_ttl_sec)
        self._arm_earliest()

    def close(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
        self._handle = self._armed_at = None

    def _arm_earliest(self) -> None:
        earliest = min((a.fence_at for a in self._running.values()), default=math.inf)
        if earliest < math.inf:
            self._arm(earliest)
        else:
            self.close()

    def _arm(self, at: float) -> None:
        if self._handle is not None:
            self._handle.cancel()
        self._armed_at = at
        delay = max(MIN_RECHECK_SEC, at - self._clock.monotonic())
        self._handle = asyncio.get_running_loop().call_later(delay, self._fire)

    def _fire(self) -> None:
        self._handle = self._armed_at = None
        for attempt in overdue(self._running.values(), self._clock.monotonic()):
            job = attempt.job
            metrics.ATTEMPTS_SELF_FENCED.labels(self.queue).inc()
            log.error("the attempt's lease could not be renewed in time (database unreachable): stopping it "
                      "before the lease runs out, so no other holder of its lock_key overlaps it",
                      extra=attempt.log_extra(lease_ttl_sec=job.lease_ttl_sec))
            # Once: a stop it ignores (its ctx.transaction() is committing) is not asked again.
            attempt.fence_at = math.inf
            attempt.request_stop("lease_lost")
        self._arm_earliest()
