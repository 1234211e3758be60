"""The scheduler: a maintenance `Service` that enqueues the jobs of due schedules.

**Exactly one job per tick, by the database.** A fire is one transaction: a compare-and-set moves
the schedule to its next tick only if its `revision` is still the one read
(`advance_schedule.sql`), and the same transaction inserts the tick's job with the idempotency key
`schedule:<name>:<tick>` and its history row (primary key (schedule, tick)). Two replicas racing
for a tick: the second blocks on the row lock until the first commits, then updates nothing and
writes nothing. Even a forged race (a stale revision) could not make a second job: the key is unique.

**Every node runs it** (`Scope.EVERY_NODE`). Correctness does not come from who runs it, so the
leader election would add nothing but its fail-over gap (up to `DL_LEADER_RETRY_SEC` × 1.1 without
ticks after the leader dies); the price is one cheap due query per tick per node, and a losing
replica's update that matches no row.

**No busy polling.** It sleeps until the earliest `next_run_at` (bounded by `max_sleep_sec`, the
backstop for a lost notification), and a `dl_schedules` NOTIFY (create, pause, resume, delete,
upsert) wakes it at once. All waits go through the injected `Clock`, and the time it calls "now" is
the clock's, so tests drive whole days of ticks with `ManualClock`.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import logging
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from typing import Any

from prometheus_client import Counter, Histogram
from pydantic import Field

from dataloader import tracing
from dataloader.maintenance.periodic import LoopService
from dataloader.maintenance.service import Scope, ServiceSettings
from dataloader.model.clock import SYSTEM_CLOCK, Clock
from dataloader.model.ids import new_id
from dataloader.model.schedule import Schedule, ScheduleSpec
from dataloader.model.schedule_timing import InvalidTiming, idempotency_key, next_tick, plan
from dataloader.schedules.declare import declared_schedules
from dataloader.storage.notifier import Notifier
from dataloader.storage.repositories import NewJob
from dataloader.storage.schedule_repository import FiredTick, ScheduleRepository

log = logging.getLogger("dataloader.schedules")

FAR_BEHIND = timedelta(days=1)

CHANNEL = "dl_schedules"

TICKS = Counter("dl_schedule_ticks_total",
                "Schedule ticks handled by this node: enqueued (a job), skipped (missed-tick policy)",
                ["schedule", "outcome"])
LAG_SECONDS = Histogram("dl_schedule_lag_seconds", "Scheduler lag: now minus the due tick, when its job is enqueued",
                        ["schedule"], buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 300, 3600, 86400))


class SchedulerSettings(ServiceSettings):
    max_sleep_sec: float = Field(default=60, gt=0, le=3600,
                                 description="Longest sleep without a due tick (lost-notification backstop)")
    retry_sec: float = Field(default=5, gt=0, le=600, description="Wait after a failed pass")
    batch_size: int = Field(default=100, ge=1, le=10_000, description="Due schedules read per statement")
    history_days: int = Field(default=30, ge=1, le=3650, description="History rows older than this are pruned")
    prune_every_sec: float = Field(default=3600, gt=0, le=86400)


class Scheduler(LoopService):
    name = "scheduler"
    scope = Scope.EVERY_NODE
    channel = CHANNEL
    logger = log
    failure_message = "pass failed"

    settings: SchedulerSettings

    def __init__(self, repo: ScheduleRepository, settings: SchedulerSettings | None = None, *,
                 dsn: str | None = None, notifier: Notifier | None = None, clock: Clock = SYSTEM_CLOCK,
                 default_lease_ttl_sec: int = 60,
                 task_of: Callable[[Callable[..., Any]], str | None] | None = None,
                 pipeline_max_attempts: Callable[[str], int | None] | None = None,
                 declared: Sequence[ScheduleSpec] | None = None) -> None:
        """`notifier` (or, run alone, `dsn`): where changes are heard (neither: wake on time only). `declared`:
        the code-declared schedules to upsert at start (None: those of `@schedule`, resolved with
        `task_of`)."""
        super().__init__(settings or SchedulerSettings(), clock=clock, dsn=dsn, notifier=notifier)
        self.repo = repo
        self.default_lease_ttl_sec = default_lease_ttl_sec
        self._task_of = task_of or (lambda func: None)
        self._pipeline_max_attempts = pipeline_max_attempts or (lambda task: None)
        self._declared = declared
        self._last_prune: float | None = None
        self.passes = 0  # completed passes (tests, diagnostics)

    # The loop is LoopService's: `set_up` declares the code's schedules once per run, `tick` is
    # one pass, and the wait is until the next due tick (the NOTIFY of a change wakes it sooner).

    async def set_up(self) -> None:
        await self.upsert_declared()

    def next_delay(self) -> float:
        delay = self.last_result if self.last_tick_ok else self.settings.retry_sec
        return min(max(delay, 0.0), self.settings.max_sleep_sec)

    async def tick(self) -> float:
        """One pass: fire every due schedule; returns seconds until the next due tick."""
        now = self.clock.wall()
        for _ in range(10):  # a full batch means more may be due; bounded so a bad row cannot spin
            due = await self.repo.due(now, self.settings.batch_size)
            for schedule in due:
                await self.fire(schedule, now)
            if len(due) < self.settings.batch_size:
                break
            now = self.clock.wall()
        await self._maybe_prune()
        self.passes += 1
        self.last_tick_at = self.clock.wall()
        next_due = await self.repo.next_due_at()
        if next_due is None:
            return self.settings.max_sleep_sec
        return (next_due - self.clock.wall()).total_seconds()

    async def fire(self, schedule: Schedule, now: datetime) -> list[FiredTick] | None:
        """Enqueue what `schedule` owes at `now` (see ticks.plan). None: another node fired it
        first, or it changed since it was read."""
        try:
            compute = functools.partial(plan, schedule.timing(), schedule.next_run_at, now, missed=schedule.missed,
                                        catch_up_limit=schedule.catch_up_limit,
                                        grace=timedelta(seconds=schedule.grace_sec))
            # A cron schedule far behind (down for days, or a hand-written next_run_at of 4713 BC)
            # enumerates up to MAX_ENUMERATED ticks: ~1 s of CPU, off the event loop, so the node's
            # heartbeats and claims do not stall meanwhile.
            far_behind = schedule.cron is not None and now - schedule.next_run_at > FAR_BEHIND
            decision = await asyncio.to_thread(compute) if far_behind else compute()
        except (InvalidTiming, OverflowError, ValueError) as exc:  # a row written by hand; the API never stores one
            # Paused, not left due: a due row that is never advanced would keep min(next_run_at)
            # in the past, and the scheduler would wake at once, forever (a busy loop).
            self.record_error(exc)
            log.error("schedule %r cannot be computed (%s: %s); it is paused", schedule.name,
                      type(exc).__name__, exc, extra={"schedule": schedule.name})
            await self.repo.fire(schedule, None, [], [])
            return None
        jobs: list[NewJob] = []
        ticks: list[FiredTick] = []
        args_json = json.dumps(schedule.args)
        max_attempts = self._pipeline_max_attempts(schedule.task) or schedule.max_attempts or 5
        for i, tick in enumerate(decision.enqueue):
            job_id = new_id()
            jobs.append(NewJob(queue=schedule.queue, task=schedule.task, lock_key=schedule.lock_key or str(job_id),
                               args_json=args_json, idempotency_key=idempotency_key(schedule.name, tick),
                               priority=schedule.priority, max_attempts=max_attempts,
                               lease_ttl_sec=schedule.lease_ttl_sec or self.default_lease_ttl_sec,
                               producer="schedule", job_id=job_id))
            ticks.append(FiredTick(tick, job_id, max((now - tick).total_seconds(), 0.0),
                                   decision.skipped if i == 0 else 0))
        # Traced, a fire that enqueues is a span of its own, a trace's root and the parent of the
        # jobs it enqueues: each tick's run is found from the tick.
        span = tracing.root_span(f"schedule {schedule.name}", {
            "dataloader.schedule.name": schedule.name, "dataloader.schedule.ticks": len(jobs),
            "messaging.destination.name": schedule.queue}) if jobs else contextlib.nullcontext()
        with span:
            fired = await self.repo.fire(schedule, decision.next_run_at, jobs, ticks,
                                         traceparent=tracing.current_traceparent())
        if fired is None:
            return None
        for tick in fired:
            TICKS.labels(schedule.name, "enqueued").inc()
            LAG_SECONDS.labels(schedule.name).observe(tick.lag_sec)
        if decision.skipped:
            TICKS.labels(schedule.name, "skipped").inc(decision.skipped)
            log.warning("schedule %r: %d missed tick(s) skipped (policy %s)", schedule.name, decision.skipped,
                        schedule.missed.value, extra={"schedule": schedule.name})
        if decision.next_run_at is None:
            log.warning("schedule %r has no tick left; it is paused", schedule.name)
        for tick in fired:
            log.info("schedule tick enqueued", extra={
                "schedule": schedule.name, "tick_at": tick.tick_at.isoformat(), "job_id": str(tick.job_id),
                "lag_sec": round(tick.lag_sec, 3)})
        return fired

    async def upsert_declared(self) -> None:
        """Write the code-declared schedules (`@schedule`) to the database."""
        if self._declared is not None:
            specs, problems = list(self._declared), []
        else:
            specs, problems = declared_schedules(self._task_of)
        for problem in problems:
            log.error("schedule declaration ignored: %s", problem)
        now = self.clock.wall()
        for spec in specs:
            first = next_tick(spec.timing(), now)
            if first is None:
                log.error("schedule %r has no tick before year 9999; not declared", spec.name)
                continue
            written = await self.repo.upsert_declared(spec, first)
            if written is not None:
                log.info("schedule declared in code %s", "created" if written else "updated",
                         extra={"schedule": spec.name, "timing": spec.timing().describe()})

    async def _maybe_prune(self) -> None:
        now = self.clock.monotonic()
        if self._last_prune is not None and now - self._last_prune < self.settings.prune_every_sec:
            return
        self._last_prune = now
        while await self.repo.prune_runs(self.settings.history_days, 10_000) >= 10_000:
            pass
