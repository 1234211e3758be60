"""The autoscaling signal's rules (flow/scaling.py), as a pure function: each rule, and that no input
the database could hand it (an infinite age, a negative count) makes it fail."""

from __future__ import annotations

import math

import pytest

from dataloader.flow.scaling import desired_workers


def want(**kw) -> tuple[int, str]:
    args = {"queue": "q", "runnable": 0, "running": 0, "oldest_age_sec": 0.0, "finished_recently": 0,
            "window_sec": 60.0, "paused": False, "concurrency": None, "target_sec": 60.0, **kw}
    s = desired_workers(**args)
    return s.desired_workers, s.reason


def test_no_backlog_keeps_the_busy_slots():
    assert want(running=5, finished_recently=600) == (5, "no backlog")
    assert want() == (0, "no backlog")


def test_a_backlog_adds_the_slots_that_drain_it_within_the_target():
    # 4 busy slots finish 240 jobs a minute: 1 job/s per slot; 600 runnable in 60 s -> 10 more
    assert want(runnable=600, running=4, finished_recently=240, oldest_age_sec=5) == (14, "backlog / throughput")
    # a backlog the busy slots already drain within the target still asks for one more slot at most
    assert want(runnable=10, running=4, finished_recently=240, oldest_age_sec=1)[0] == 5


def test_without_throughput_the_busy_slots_double():
    assert want(runnable=1000, running=8) == (16, "backlog, no throughput yet")
    assert want(runnable=1000) == (1, "backlog, no throughput yet")


def test_a_late_backlog_multiplies_the_extra_slots_at_most_fourfold():
    assert want(runnable=600, running=4, finished_recently=240, oldest_age_sec=120) == (
        24, "backlog / throughput, late")
    assert want(runnable=10_000, running=4, finished_recently=240, oldest_age_sec=1e9)[0] == 4 + 167 * 4


def test_caps_make_more_slots_useless():
    assert want(runnable=3, running=2) == (4, "backlog, no throughput yet")  # doubled: 2 + 2
    assert want(runnable=1, running=8)[0] == 9  # never more slots than jobs
    assert want(runnable=600, running=4, finished_recently=240, concurrency=6) == (
        6, "backlog / throughput, capped by concurrency")
    assert want(runnable=600, running=4, paused=True) == (4, "paused")  # only what still runs


def test_jobs_a_tasks_concurrency_holds_back_are_no_jobs_to_run():
    # 600 runnable would want 10 more slots, but their task's cap holds back 595: 5 can start
    assert want(runnable=600, running=4, finished_recently=240, task_held=595) == (
        9, "backlog / throughput, capped by task concurrency")
    assert want(runnable=600, running=4, finished_recently=240, task_held=10)[0] == 14  # room enough
    assert want(runnable=5, running=3, task_held=5) == (3, "backlog, no throughput yet, capped by task concurrency")
    assert want(runnable=5, running=3, task_held=math.nan)[0] == 6  # a value that is no count reads as 0


@pytest.mark.parametrize("odd", [math.inf, -math.inf, math.nan, -5, None, "x"])
def test_no_input_makes_it_fail(odd):
    for field in ("runnable", "running", "oldest_age_sec", "finished_recently"):
        n, _ = want(**{"runnable": 10, "running": 2, "finished_recently": 60, field: odd})
        assert isinstance(n, int) and n >= 0
    assert want(runnable=10, target_sec=odd)[0] >= 0
