"""Periodic schedules: cron (in a time zone) or fixed intervals, declared in code with `@schedule`
or managed at run time (`app.schedules`, `/api/v1/schedules`, `dataloader schedules`), fired by the
`scheduler` maintenance service on every node with exactly one job per tick, guaranteed by the
database. See docs/patterns.md, "Periodic schedules".

- ticks.py: when a schedule fires (pure functions: cron, DST, intervals, missed ticks)
- model.py: ScheduleSpec (validated input), Schedule and ScheduleRun (rows)
- declare.py: the `@schedule` decorator
- scheduler.py: the Scheduler service (imported by the App, not here: it needs storage)
"""

from dataloader.model.schedule import Schedule, ScheduleRun, ScheduleSpec
from dataloader.model.schedule_timing import MissedPolicy, Timing, next_tick, next_ticks, plan
from dataloader.schedules.declare import schedule

__all__ = ["MissedPolicy", "Schedule", "ScheduleRun", "ScheduleSpec", "Timing", "next_tick", "next_ticks", "plan",
           "schedule"]
