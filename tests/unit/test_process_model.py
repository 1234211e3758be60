"""The pure values of processes: retry delays and which errors retry, history ranges, timers."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from dataloader.exceptions import FatalError
from dataloader.processes import HistoryRange, RetryPolicy, SetTimer


class Declined(Exception):
    pass


def test_retry_delays_grow_by_the_coefficient_up_to_the_cap():
    policy = RetryPolicy(initial_timeout=1, backoff_coefficient=3, max_timeout=20, max_attempts=10)
    assert [policy.delay(a) for a in range(1, 6)] == [1, 3, 9, 20, 20]
    assert RetryPolicy().delay(10_000) == RetryPolicy().max_timeout  # no overflow


@pytest.mark.parametrize(("entry", "retryable"), [(Declined, False), ("Declined", False),
                                                   (f"{__name__}.Declined", False), (KeyError, True), ("Other", True)])
def test_non_retryable_errors_by_type_or_name(entry, retryable):
    assert RetryPolicy(non_retryable_errors=(entry,)).retryable(Declined("x")) is retryable


def test_fatal_errors_never_retry():
    assert not RetryPolicy().retryable(FatalError("no"))


@pytest.mark.parametrize("bad", [{"initial_timeout": -1}, {"backoff_coefficient": 0.5}, {"max_attempts": 0},
                                 {"max_timeout": 10**9}])
def test_retry_policy_refuses_nonsense(bad):
    with pytest.raises(ValueError):
        RetryPolicy(**bad)


@pytest.mark.parametrize("bad", [{"offset": -1}, {"limit": 0}, {"limit": True}, {"direction": "up"},
                                 {"unknown": 1}, "text"])
def test_history_range_refuses_nonsense(bad):
    with pytest.raises(ValueError):
        HistoryRange.of(bad)


def test_history_range_defaults_to_everything_forward():
    assert HistoryRange.of(None) == HistoryRange(0, None, "forward")
    assert HistoryRange.of({"limit": 5, "direction": "backward"}).to_dict() == {
        "offset": 0, "limit": 5, "direction": "backward"}


def test_set_timer_needs_one_aware_time():
    now = datetime(2026, 1, 1, tzinfo=UTC)
    assert SetTimer(after=5).due(now) == now + timedelta(seconds=5)
    assert SetTimer(at=now).due() == now
    for bad in ({}, {"at": now, "after": 1}, {"at": datetime(2026, 1, 1)}, {"after": -1}, {"after": float("nan")}):
        with pytest.raises(ValueError):
            SetTimer(**bad)
