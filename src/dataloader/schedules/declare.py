"""`@schedule`: periodic schedules declared in code, next to the pipeline they run.

    @schedule("0 2 * * *", tz="Europe/Berlin", args={"kind": "daily"})
    @pipeline("report.daily")
    async def daily_report(ctx): ...

Everything is validated when the decorator runs (a bad cron or zone fails the import, which the
CLI reports as a configuration error). The declaration is only recorded here; every scheduler
upserts the declared schedules when it starts (`Scheduler.upsert_declared`), resolving the task
from the pipeline the function is registered as (or `task=`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from dataloader.model.schedule import ScheduleSpec
from dataloader.model.schedule_timing import MissedPolicy

_PLACEHOLDER = "unresolved"


@dataclass(frozen=True)
class Declaration:
    func: Callable[..., Any]
    name: str | None
    task: str | None
    fields: dict[str, Any] = field(default_factory=dict)


_DECLARED: list[Declaration] = []


def schedule(
    cron: str | None = None,
    *,
    every: timedelta | float | None = None,
    tz: str = "UTC",
    name: str | None = None,
    task: str | None = None,
    args: dict[str, Any] | None = None,
    queue: str = "default",
    missed: MissedPolicy | str = MissedPolicy.run_once,
    catch_up_limit: int = 10,
    grace: timedelta | float = 60,
    lock_key: str | None = None,
    priority: int = 100,
    max_attempts: int | None = None,
    lease_ttl_sec: int | None = None,
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Run the decorated pipeline on a schedule: `cron` (5 fields, in `tz`) or `every` (a timedelta
    or seconds). `name` defaults to the task name (give one per schedule when a pipeline has
    several). Stack it with `@pipeline` in either order."""
    every_sec = every.total_seconds() if isinstance(every, timedelta) else every
    grace_sec = grace.total_seconds() if isinstance(grace, timedelta) else grace
    fields = {"cron": cron, "every_sec": every_sec, "tz": tz, "args": dict(args or {}), "queue": queue,
              "missed": MissedPolicy(missed), "catch_up_limit": catch_up_limit, "grace_sec": int(grace_sec),
              "lock_key": lock_key, "priority": priority, "max_attempts": max_attempts,
              "lease_ttl_sec": lease_ttl_sec}
    ScheduleSpec(name=name or _PLACEHOLDER, task=task or _PLACEHOLDER, **fields)  # fail at import, not later

    def decorate(func: Callable[..., Any]) -> Callable[..., Any]:
        _DECLARED.append(Declaration(func, name, task, fields))
        return func

    return decorate


def declared_schedules(task_of: Callable[[Callable[..., Any]], str | None]) -> tuple[list[ScheduleSpec], list[str]]:
    """The declared schedules as specs, and a problem for each that cannot be one (no pipeline
    for its function, a name declared twice). `task_of(func)` names the pipeline of a function."""
    specs: dict[str, ScheduleSpec] = {}
    problems: list[str] = []
    for decl in _DECLARED:
        task = decl.task or task_of(decl.func)
        if task is None:
            problems.append(f"@schedule on {decl.func.__module__}.{decl.func.__qualname__}: no @pipeline registers "
                            "this function; add @pipeline(...) or give task=")
            continue
        name = decl.name or task
        spec = ScheduleSpec(name=name, task=task, **decl.fields)
        if name in specs and specs[name] != spec:
            problems.append(f"schedule {name!r} is declared twice with different definitions; give each a name=")
            continue
        specs[name] = spec
    return list(specs.values()), problems


def clear_declared() -> None:
    """Forget every declaration (tests)."""
    _DECLARED.clear()
