"""The tick computation as pure functions: cron in a zone with daylight saving (Europe/Berlin and
America/New_York), intervals, and what each missed-tick policy enqueues after an outage."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from pydantic import ValidationError

from dataloader.model.clock import ManualClock
from dataloader.model.schedule_timing import InvalidTiming, idempotency_key, next_tick
from dataloader.schedules import ScheduleSpec, Timing, next_ticks, plan


def utc(*args: int) -> datetime:
    return datetime(*args, tzinfo=UTC)


BERLIN_0230 = Timing(cron="30 2 * * *", tz="Europe/Berlin")


def test_a_daily_0230_in_berlin_runs_once_on_the_spring_forward_day_shifted_by_the_gap():
    # 2030-03-31: 02:00 CET -> 03:00 CEST; 02:30 does not exist and runs at 03:30 CEST (01:30Z).
    assert next_ticks(BERLIN_0230, utc(2030, 3, 29, 12), 3) == [
        utc(2030, 3, 30, 1, 30),   # 02:30 CET
        utc(2030, 3, 31, 1, 30),   # the gap day: once
        utc(2030, 4, 1, 0, 30),    # 02:30 CEST
    ]


def test_a_daily_0230_in_berlin_runs_once_on_the_fall_back_day_at_the_first_occurrence():
    # 2030-10-27: 03:00 CEST -> 02:00 CET; 02:30 happens twice, the job runs at the first one only.
    ticks = next_ticks(BERLIN_0230, utc(2030, 10, 26, 12), 2)
    assert ticks == [utc(2030, 10, 27, 0, 30), utc(2030, 10, 28, 1, 30)]
    # asked from inside the repeated hour (after the first 02:30), the next is the next day's
    assert next_tick(BERLIN_0230, utc(2030, 10, 27, 1, 15)) == utc(2030, 10, 28, 1, 30)


def test_an_hourly_job_on_dst_days_fires_once_per_local_time_and_never_twice_at_one_instant():
    hourly = Timing(cron="30 * * * *", tz="Europe/Berlin")
    spring = next_ticks(hourly, utc(2030, 3, 31, 0), 3)
    assert spring == [utc(2030, 3, 31, 0, 30), utc(2030, 3, 31, 1, 30), utc(2030, 3, 31, 2, 30)]
    fall = next_ticks(hourly, utc(2030, 10, 27, 0), 3)
    # 02:30 CEST (00:30Z); the repeated 02:30 CET (01:30Z) is skipped; 03:30 CET (02:30Z)
    assert fall == [utc(2030, 10, 27, 0, 30), utc(2030, 10, 27, 2, 30), utc(2030, 10, 27, 3, 30)]
    for ticks in (spring, fall):
        assert ticks == sorted(set(ticks))


def test_new_york_spring_forward_and_fall_back():
    ny = Timing(cron="30 2 * * *", tz="America/New_York")
    # 2030-03-10: 02:00 EST -> 03:00 EDT; 2030-11-03: 02:00 EDT -> 01:00 EST (02:30 exists once then)
    assert next_tick(ny, utc(2030, 3, 10, 0)) == utc(2030, 3, 10, 7, 30)   # 02:30 EST = 03:30 EDT
    assert next_ticks(ny, utc(2030, 11, 2, 12), 2) == [utc(2030, 11, 3, 7, 30), utc(2030, 11, 4, 7, 30)]
    at_0130 = Timing(cron="30 1 * * *", tz="America/New_York")  # 01:30 happens twice on 11-03
    assert next_ticks(at_0130, utc(2030, 11, 2, 12), 2) == [utc(2030, 11, 3, 5, 30), utc(2030, 11, 4, 6, 30)]


def test_ticks_driven_by_a_manual_clock_follow_the_zone_across_a_dst_change():
    clock = ManualClock(wall_start=utc(2030, 3, 30, 12))
    seen = []
    for _ in range(3):
        tick = next_tick(BERLIN_0230, clock.wall())
        seen.append(tick)
        clock.advance((tick - clock.wall()).total_seconds())
    assert [t.astimezone(UTC).hour for t in seen] == [1, 0, 0]  # 02:30 CET->01:30Z; then 02:30 CEST->00:30Z
    assert seen[0] == utc(2030, 3, 31, 1, 30)


def test_intervals_are_anchored_at_the_epoch():
    every5 = Timing(every=timedelta(minutes=5))
    assert next_ticks(every5, utc(2030, 1, 1, 10, 2, 17), 3) == [
        utc(2030, 1, 1, 10, 5), utc(2030, 1, 1, 10, 10), utc(2030, 1, 1, 10, 15)]
    assert next_tick(every5, utc(2030, 1, 1, 10, 5)) == utc(2030, 1, 1, 10, 10)  # strictly after


@pytest.mark.parametrize(("timing", "problem"), [
    (dict(cron="61 * * * *"), "invalid cron"),
    (dict(cron="0 0 30 2 *"), "never matches"),
    (dict(cron="0 0 * * * *"), "5 fields"),
    (dict(cron="* * * * *", tz="Mars/Olympus"), "unknown time zone"),
    (dict(cron="* * * * *", tz="../etc/passwd"), "unknown time zone"),
    (dict(cron="0 2\x00 * * *"), "invalid cron"),
    (dict(every=timedelta(milliseconds=500)), "between 1 second"),
    (dict(every=timedelta(days=400)), "between 1 second"),
    (dict(), "not both and not neither"),
    (dict(cron="* * * * *", every=timedelta(seconds=5)), "not both"),
])
def test_bad_timings_are_refused(timing, problem):
    with pytest.raises(InvalidTiming, match=problem):
        Timing(**timing)


EVERY_MIN = Timing(every=timedelta(minutes=1))
DUE = utc(2030, 1, 1, 10, 0)


def test_on_time_a_single_tick_enqueues_under_every_policy():
    for policy in ("skip", "run_once", "catch_up"):
        decision = plan(EVERY_MIN, DUE, DUE + timedelta(seconds=0.3), missed=policy)
        assert decision.enqueue == (DUE,) and decision.skipped == 0
        assert decision.next_run_at == DUE + timedelta(minutes=1)


def test_missed_ticks_after_a_10_minute_outage_follow_the_policy():
    now = DUE + timedelta(minutes=10, seconds=20)  # ticks 10:00..10:10 are due (11), the last 20 s late
    skip = plan(EVERY_MIN, DUE, now, missed="skip", grace=timedelta(seconds=60))
    assert skip.enqueue == (utc(2030, 1, 1, 10, 10),) and skip.skipped == 10  # the on-time one only
    late = plan(EVERY_MIN, DUE, now, missed="skip", grace=timedelta(seconds=5))
    assert late.enqueue == () and late.skipped == 11  # nothing on time: next future tick only
    once = plan(EVERY_MIN, DUE, now, missed="run_once", grace=timedelta(seconds=5))
    assert once.enqueue == (utc(2030, 1, 1, 10, 10),) and once.skipped == 10
    catch = plan(EVERY_MIN, DUE, now, missed="catch_up", catch_up_limit=3)
    assert catch.enqueue == (utc(2030, 1, 1, 10, 8), utc(2030, 1, 1, 10, 9), utc(2030, 1, 1, 10, 10))
    assert catch.skipped == 8
    for decision in (skip, late, once, catch):
        assert decision.next_run_at == utc(2030, 1, 1, 10, 11)


def test_a_month_long_outage_of_a_one_second_schedule_is_planned_without_enumerating_it():
    now = DUE + timedelta(days=30, seconds=0.5)
    decision = plan(Timing(every=timedelta(seconds=1)), DUE, now, missed="catch_up", catch_up_limit=2)
    assert decision.enqueue == (now - timedelta(seconds=1.5), now - timedelta(seconds=0.5))
    assert decision.skipped == 30 * 86400 + 1 - 2
    assert decision.next_run_at == now + timedelta(seconds=0.5)


def test_a_cron_outage_counts_missed_ticks():
    hourly = Timing(cron="0 * * * *", tz="Europe/Berlin")
    decision = plan(hourly, DUE, DUE + timedelta(hours=5, minutes=1), missed="run_once")
    assert decision.enqueue == (DUE + timedelta(hours=5),) and decision.skipped == 5


def test_not_yet_due_plans_nothing():
    assert plan(EVERY_MIN, DUE, DUE - timedelta(seconds=1)).enqueue == ()


def test_the_idempotency_key_names_the_schedule_and_the_tick_in_utc():
    from zoneinfo import ZoneInfo

    assert idempotency_key("report", datetime(2030, 1, 1, 4, 0, tzinfo=ZoneInfo("Europe/Berlin"))) == \
        "schedule:report:2030-01-01T03:00:00Z"


@pytest.mark.parametrize("fields", [
    dict(cron="0 2 * * *", every_sec=5),
    dict(cron="bad"),
    dict(every_sec=10**30),
    dict(every_sec=float("nan")),
    dict(every_sec=5, priority=2**40),
    dict(every_sec=5, args={"x": float("nan")}),
    dict(every_sec=5, args={"x": "a\x00b"}),
    dict(every_sec=5, catch_up_limit=10**9),
    dict(every_sec=5, tz="Nowhere/City"),
])
def test_spec_validation_refuses_bad_input(fields):
    with pytest.raises(ValidationError):
        ScheduleSpec(name="n", task="t", **fields)


def test_spec_names_are_restricted():
    for bad in ("", "a b", "a/b", "a\x00", "-lead"):
        with pytest.raises(ValidationError):
            ScheduleSpec(name=bad, task="t", every_sec=5)
    assert ScheduleSpec(name="report.daily:eu@v2", task="t", every_sec=5).name == "report.daily:eu@v2"
