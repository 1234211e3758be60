"""When a schedule fires: the tick computation, as pure functions of a time (no clock, no I/O), so
every rule — cron in a time zone, daylight-saving days, fixed intervals, missed ticks — is tested
with plain datetimes.

Cron expressions are parsed and iterated by `croniter` (5 fields, or `@daily`-style macros); this
module only decides how the expression's *local wall-clock* times map to instants:

- Cron times are wall-clock times in the schedule's zone (`tz`, an IANA name). Each local time the
  expression matches fires at most once:
  - **spring forward** (the local time does not exist, e.g. 02:30 in Europe/Berlin on the last
    Sunday of March): it fires once, shifted forward by the gap (02:30 → 03:30 CEST, the instant
    PEP 495 gives a nonexistent time); a tick that then falls on an instant already fired (an
    hourly `30 * * * *` gives 02:30→03:30 and 03:30) fires once.
  - **fall back** (the local time happens twice, e.g. 02:30 on the last Sunday of October): it
    fires once, at the first occurrence (summer time). So an hourly job skips the repeated hour;
    a daily 02:30 job runs once, not twice.
- Intervals (`every`) are anchored at the Unix epoch in UTC: ticks are the multiples of the period
  (every 5 minutes → :00, :05, …), whichever replica computes them, whatever the zone.

Ticks are whole instants in UTC; the idempotency key of a tick's job is made from one, so every
replica must compute identical values (no sub-microsecond noise, no local time).
"""

from __future__ import annotations

import enum
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import cache
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError, available_timezones

from croniter import CroniterBadCronError, CroniterBadDateError, CroniterNotAlphaError, croniter

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
# Ticks are looked for up to here: a schedule whose next tick is later never fires (storable too).
LAST_TICK = datetime(9999, 1, 1, tzinfo=UTC)
# Ticks are looked for from here on: an earlier `after` (a hand-written next_run_at of 4713 BC or
# -infinity) is read as this, so every computation stays inside Python's date range.
FIRST_AFTER = EPOCH - timedelta(microseconds=1)
MIN_EVERY = timedelta(seconds=1)
MAX_EVERY = timedelta(days=366)
# How far one call enumerates missed ticks before it stops counting (a 1-second schedule down for
# a month would be 2.6 million ticks): the rest are counted arithmetically for intervals, and
# reported as "at least this many" for cron.
MAX_ENUMERATED = 10_000
CRON_MACROS = {"@yearly", "@annually", "@monthly", "@weekly", "@daily", "@midnight", "@hourly"}


class MissedPolicy(enum.StrEnum):
    """What happens to ticks that came due while no scheduler ran (every node down, or all paused
    by a stuck database). A tick is *missed* when a later tick is due too, or when it is late by
    more than the schedule's grace.

    - `skip`: missed ticks enqueue nothing; only a tick that is on time (within the grace) runs.
    - `run_once` (the default): one job for all of them, at the latest due tick.
    - `catch_up`: one job per missed tick, the most recent `catch_up_limit` of them.
    """

    skip = "skip"
    run_once = "run_once"
    catch_up = "catch_up"


class InvalidTiming(ValueError):
    """A cron expression, zone or interval that cannot schedule anything."""


@dataclass(frozen=True, slots=True)
class Timing:
    """When a schedule fires: a cron expression in a zone, or a fixed interval."""

    cron: str | None = None
    every: timedelta | None = None
    tz: str = "UTC"

    def __post_init__(self) -> None:
        if (self.cron is None) == (self.every is None):
            raise InvalidTiming("give a cron expression or an interval (every), not both and not neither")
        if self.every is not None:
            if not MIN_EVERY <= self.every <= MAX_EVERY:
                raise InvalidTiming("every must be between 1 second and 366 days")
            if self.every % timedelta(milliseconds=1):
                raise InvalidTiming("every must be a whole number of milliseconds")
        zone(self.tz)
        if self.cron is not None:
            check_cron(self.cron)

    @property
    def every_ms(self) -> int | None:
        return None if self.every is None else self.every // timedelta(milliseconds=1)

    def describe(self) -> str:
        if self.cron is not None:
            return f"cron {self.cron!r} in {self.tz}"
        return f"every {self.every.total_seconds():g} s"  # type: ignore[union-attr]


def zone(name: str) -> ZoneInfo:
    if not isinstance(name, str) or not name or "\x00" in name or len(name) > 64 or name.startswith(("/", ".")):
        raise InvalidTiming(f"unknown time zone {name!r}")
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, OSError):
        raise InvalidTiming(f"unknown time zone {name!r} (use an IANA name, e.g. Europe/Berlin)") from None


@cache
def _canonical_zones() -> frozenset[str]:
    # The zone files that are not IANA zones of their own: the host's `localtime` (whatever the
    # machine is set to), `posixrules`, `Factory`, and the posix/ and right/ copies (right/ counts
    # leap seconds, so its times are not civil times).
    return frozenset(name for name in available_timezones()
                     if name not in ("localtime", "posixrules", "Factory")
                     and not name.startswith(("posix/", "right/")))


def check_zone_name(name: str) -> str:
    """A new schedule's zone must be a canonical IANA name (Europe/Berlin, UTC), the same on every
    node; a stored one is read as it is (`zone`)."""
    zone(name)
    if name not in _canonical_zones():
        raise InvalidTiming(f"time zone {name!r} is not an IANA zone name (e.g. Europe/Berlin, UTC)")
    return name


def check_cron(expression: str) -> None:
    """A standard 5-field expression (minute hour day month weekday) or a macro, that matches at
    least one time (0 0 30 2 * never does)."""
    text = " ".join(expression.split()) if isinstance(expression, str) else ""
    if not text or len(expression) > 200 or "\x00" in expression:
        raise InvalidTiming(f"invalid cron expression {expression!r}")
    if not (text.lower() in CRON_MACROS or len(text.split(" ")) == 5):
        raise InvalidTiming(f"invalid cron expression {expression!r}: use 5 fields (minute hour day month "
                            "weekday) or @hourly/@daily/@weekly/@monthly/@yearly")
    try:
        valid = croniter.is_valid(text)
    except Exception:  # croniter raises a few kinds on odd input
        valid = False
    if not valid:
        raise InvalidTiming(f"invalid cron expression {expression!r}")
    try:
        croniter(text, datetime(2000, 1, 1)).get_next(datetime)
    except (CroniterBadDateError, CroniterBadCronError, CroniterNotAlphaError, ValueError, OverflowError):
        raise InvalidTiming(f"cron expression {expression!r} never matches a date") from None


def _local_matches(cron: str, start_local: datetime) -> Iterator[datetime]:
    """Naive local wall-clock times matching `cron`, strictly after `start_local` (naive)."""
    it = croniter(" ".join(cron.split()), start_local)
    while True:
        try:
            value = it.get_next(datetime)
        except (CroniterBadDateError, OverflowError, ValueError):
            return
        yield value


def iter_ticks(timing: Timing, after: datetime) -> Iterator[datetime]:
    """Ticks (aware, UTC, strictly increasing) strictly after `after`, up to LAST_TICK.

    `after` may be any time a timestamptz decodes to (storage/db.py clamps +-infinity, 294276 AD
    and 4713 BC to datetime.max/min): past LAST_TICK there is nothing, and a time before the Unix
    epoch starts the search at the epoch (no tick before 1970 is ever due for the first time), so
    no arithmetic here leaves Python's date range."""
    if after >= LAST_TICK:
        return
    after = max(after, FIRST_AFTER).astimezone(UTC)
    if timing.every is not None:
        step = timing.every
        k = (after - EPOCH) // step + 1
        tick = EPOCH + k * step
        while tick < LAST_TICK:
            yield tick
            tick += step
        return
    tz = zone(timing.tz)
    # Start one day early in local time: in a repeated (fall-back) hour the naive local time of
    # `after` is ambiguous, so matches are produced from safely before and filtered by instant.
    start_local = (after.astimezone(tz) - timedelta(days=1)).replace(tzinfo=None, fold=0)
    last = after
    for local in _local_matches(timing.cron or "", start_local):
        # fold=0: a repeated time is its first occurrence; a nonexistent one is shifted by the gap.
        tick = local.replace(tzinfo=tz, fold=0).astimezone(UTC)
        if tick >= LAST_TICK:
            return
        if tick <= last:  # before `after`, or an instant a gap-shifted time already gave
            continue
        last = tick
        yield tick


def next_tick(timing: Timing, after: datetime) -> datetime | None:
    """The first tick strictly after `after`; None when there is none before LAST_TICK."""
    return next(iter_ticks(timing, after), None)


def next_ticks(timing: Timing, after: datetime, count: int) -> list[datetime]:
    """The next `count` ticks strictly after `after`."""
    out: list[datetime] = []
    for tick in iter_ticks(timing, after):
        if len(out) >= count:
            break
        out.append(tick)
    return out


@dataclass(frozen=True, slots=True)
class TickPlan:
    """What to do with a schedule that is due: enqueue one job per tick in `enqueue` (oldest
    first), count `skipped` ticks as skipped, and move `next_run_at` to the first tick after now
    (None: no tick is left before LAST_TICK; the schedule stays but never fires again)."""

    enqueue: tuple[datetime, ...]
    skipped: int
    next_run_at: datetime | None


def plan(timing: Timing, due_at: datetime, now: datetime, *, missed: MissedPolicy | str = MissedPolicy.run_once,
         catch_up_limit: int = 10, grace: timedelta = timedelta(seconds=60)) -> TickPlan:
    """Decide what a schedule whose `next_run_at` is `due_at` does at `now`.

    Due ticks are `due_at` and every tick after it up to `now`. The latest of them is *on time* if
    it is at most `grace` old; every other due tick is *missed*. `missed` says what missed ticks
    become (see MissedPolicy); an on-time tick always enqueues."""
    policy = MissedPolicy(missed)
    if due_at > now:
        return TickPlan((), 0, due_at)
    keep = max(1, catch_up_limit) if policy is MissedPolicy.catch_up else 1
    window: deque[datetime] = deque([due_at], maxlen=keep)  # the most recent due ticks
    total = 1
    following: datetime | None
    if timing.every is not None:
        step = timing.every
        first = next_tick(timing, due_at)  # the grid after due_at (due_at itself may be off it)
        last_due = EPOCH + ((now.astimezone(UTC) - EPOCH) // step) * step
        if first is None or first > now:
            following = first
        else:
            total += (last_due - first) // step + 1
            count = min(keep, (last_due - first) // step + 1)
            window.extend(last_due - step * i for i in reversed(range(count)))
            following = last_due + step if last_due + step < LAST_TICK else None
    else:
        following = None
        for tick in _walked_ticks(timing, due_at, now):
            if tick > now:
                following = tick
                break
            total += 1
            window.append(tick)
    due = list(window)
    on_time = now - due[-1] <= grace
    if policy is MissedPolicy.skip:
        chosen = due[-1:] if on_time else []
    else:
        chosen = due[-keep:]
    return TickPlan(tuple(chosen), total - len(chosen), following)


def _walked_ticks(timing: Timing, due_at: datetime, now: datetime) -> Iterator[datetime]:
    """The ticks after `due_at`, as `plan` walks them. Far behind (a per-minute schedule down
    for a week), after MAX_ENUMERATED - 1 of them it jumps to the last day before `now`: the ticks
    in between are counted as skipped only as far as enumerated."""
    walked = 0
    for tick in iter_ticks(timing, due_at):
        yield tick
        walked += 1
        if walked >= MAX_ENUMERATED - 1:
            yield from iter_ticks(timing, max(tick, now - timedelta(days=1)))
            return


def idempotency_key(schedule_name: str, tick: datetime) -> str:
    """The unique key of a tick's job: `schedule:<name>:<tick in UTC, ISO 8601>`."""
    return f"schedule:{schedule_name}:{tick.astimezone(UTC).isoformat().replace('+00:00', 'Z')}"
