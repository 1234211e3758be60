"""Schedules: create, read, list, pause, resume, delete, history — the rules behind
`app.schedules`, the HTTP API (`/api/v1/schedules`) and the CLI (`dataloader schedules`).

Input is a `ScheduleSpec` (validated before anything is written: a bad cron, an unknown zone, an
impossible date, NUL characters or args PostgreSQL cannot store are refused here). The first tick
is computed from the clock now; a resume starts from the first tick after the resume (the ticks of
a pause are skipped on purpose, not "missed")."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

from pydantic import ValidationError

from dataloader.exceptions import (
    InvalidSchedule,
    InvalidScheduleRequest,
    ScheduleExists,
    ScheduleNotFound,
    ValidationFailed,
)
from dataloader.model.clock import SYSTEM_CLOCK, Clock
from dataloader.model.schedule import Schedule, ScheduleRun, ScheduleSpec
from dataloader.model.schedule_timing import InvalidTiming, next_tick, next_ticks
from dataloader.storage.audit_repository import audited
from dataloader.storage.schedule_repository import ScheduleRepository

MAX_HISTORY_LIMIT = 1000


class ScheduleManager:
    def __init__(self, repo: ScheduleRepository, *, clock: Clock = SYSTEM_CLOCK,
                 check_task: Callable[[str, str], None] | None = None) -> None:
        """`check_task(task, queue)`: the jobs' unknown-task rule (JobManager.check_task), applied
        when a schedule is created so a schedule of a task this process would fail is refused at
        once, as a trigger of it is, not at its first tick."""
        self.repo = repo
        self.clock = clock
        self.check_task = check_task

    @staticmethod
    def spec(**fields: Any) -> ScheduleSpec:
        """A ScheduleSpec from keyword fields (`every` may be a timedelta), or InvalidScheduleRequest."""
        every = fields.pop("every", None)
        if every is not None:
            if fields.get("every_sec") is not None:
                raise InvalidScheduleRequest("give every or every_sec, not both")
            fields["every_sec"] = every.total_seconds() if isinstance(every, timedelta) else every
        try:
            return ScheduleSpec(**fields)
        except ValidationError as exc:  # the model's check: HTTP's validation_error for the same body
            failed = ValidationFailed.from_errors(exc.errors())
            raise InvalidSchedule(str(failed), failed.fields) from None

    async def create(self, spec: ScheduleSpec) -> Schedule:
        if self.check_task is not None:
            self.check_task(spec.task, spec.queue)
        first = next_tick(spec.timing(), self.clock.wall())
        if first is None:
            raise InvalidScheduleRequest(f"schedule {spec.name!r} has no tick before the year 9999")
        # the spec without its args: the trail keeps what was set up, never a payload
        details = spec.model_dump(mode="json", exclude={"name", "args"}, exclude_none=True)
        async with audited(self.repo, "schedule.create", "schedule", spec.name, details) as change:
            created = await change.repo.insert(spec, first)
            if created is None:
                raise ScheduleExists(f"a schedule named {spec.name!r} already exists (delete it first)")
        return created

    async def get(self, name: str) -> Schedule:
        schedule = await self.repo.get(name)
        if schedule is None:
            raise ScheduleNotFound(f"no schedule {name!r}")
        return schedule

    async def list(self) -> list[Schedule]:
        return await self.repo.list()

    async def pause(self, name: str) -> Schedule:
        async with audited(self.repo, "schedule.pause", "schedule", name) as change:
            schedule = await change.repo.set_paused(name, True, None)
            if schedule is None:
                raise ScheduleNotFound(f"no schedule {name!r}")
        return schedule

    async def resume(self, name: str) -> Schedule:
        current = await self.get(name)
        first = next_tick(current.timing(), self.clock.wall())
        if first is None:
            raise InvalidScheduleRequest(f"schedule {name!r} has no tick left before the year 9999")
        async with audited(self.repo, "schedule.resume", "schedule", name) as change:
            schedule = await change.repo.set_paused(name, False, first)
            if schedule is None:
                raise ScheduleNotFound(f"no schedule {name!r}")
        return schedule

    async def delete(self, name: str) -> None:
        async with audited(self.repo, "schedule.delete", "schedule", name) as change:
            if not await change.repo.delete(name):
                raise ScheduleNotFound(f"no schedule {name!r}")

    async def history(self, name: str, *, before: datetime | None = None, limit: int = 100) -> list[ScheduleRun]:
        """What each tick enqueued (newest first) and the job's status now."""
        if not 1 <= limit <= MAX_HISTORY_LIMIT:
            raise InvalidScheduleRequest(f"limit must be between 1 and {MAX_HISTORY_LIMIT}")
        await self.get(name)
        return await self.repo.history(name, before, limit)

    def upcoming(self, schedule: Schedule, count: int = 5) -> list[datetime]:
        """The schedule's next `count` run times from its next_run_at (none while paused)."""
        if schedule.paused:
            return []
        first = schedule.next_run_at
        try:
            timing = schedule.timing()
        except InvalidTiming:  # a row written by hand (the scheduler pauses it when it comes due)
            return [first] if count > 0 else []
        return [first, *next_ticks(timing, first, count - 1)] if count > 0 else []
