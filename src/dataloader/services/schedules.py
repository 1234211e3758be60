"""Schedules: create, read, list, pause, resume, delete, history — the rules behind
`app.schedules`, the HTTP API (`/api/v1/schedules`) and the CLI (`dataloader schedules`).

Input is a `ScheduleSpec` (validated before anything is written: a bad cron, an unknown zone, an
impossible date, NUL characters or args PostgreSQL cannot store are refused here). The first tick
is computed from the clock now; a resume starts from the first tick after the resume (the ticks of
a pause are skipped on purpose, not "missed")."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from pydantic import ValidationError

from dataloader.clock import SYSTEM_CLOCK, Clock
from dataloader.exceptions import InvalidScheduleRequest, ScheduleExists, ScheduleNotFound
from dataloader.schedules.model import Schedule, ScheduleRun, ScheduleSpec
from dataloader.schedules.ticks import InvalidTiming, next_tick, next_ticks
from dataloader.storage.schedule_repository import ScheduleRepository

MAX_HISTORY_LIMIT = 1000


class ScheduleService:
    def __init__(self, repo: ScheduleRepository, *, clock: Clock = SYSTEM_CLOCK) -> None:
        self.repo = repo
        self.clock = clock

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
        except ValidationError as exc:
            raise InvalidScheduleRequest("; ".join(
                f"{'.'.join(map(str, e['loc'])) or 'schedule'}: {e['msg'].removeprefix('Value error, ')}"
                for e in exc.errors())) from None

    async def create(self, spec: ScheduleSpec) -> Schedule:
        first = next_tick(spec.timing(), self.clock.wall())
        if first is None:
            raise InvalidScheduleRequest(f"schedule {spec.name!r} has no tick before the year 9999")
        created = await self.repo.insert(spec, first)
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
        schedule = await self.repo.set_paused(name, True, None)
        if schedule is None:
            raise ScheduleNotFound(f"no schedule {name!r}")
        return schedule

    async def resume(self, name: str) -> Schedule:
        current = await self.get(name)
        first = next_tick(current.timing(), self.clock.wall())
        if first is None:
            raise InvalidScheduleRequest(f"schedule {name!r} has no tick left before the year 9999")
        schedule = await self.repo.set_paused(name, False, first)
        if schedule is None:
            raise ScheduleNotFound(f"no schedule {name!r}")
        return schedule

    async def delete(self, name: str) -> None:
        if not await self.repo.delete(name):
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
