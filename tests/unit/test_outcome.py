"""The outcome decision (`workers/outcome.py`) without a database: every combination of stop
reason × whether the pipeline saw the stop × how it ended (returned nothing, a value, an outcome;
raised an error, a FatalError, JobStopped, an outcome; interrupted) × attempts left, against the
rules the README states. The expected table below is written from those rules, case by case, not
from the implementation; the explicit rows after it pin the exact values (delays, texts)."""

from __future__ import annotations

import asyncio
import itertools
import json
import math
from datetime import timedelta
from typing import Any

import pytest

import dataloader
from dataloader.exceptions import Cancel, FatalError, JobStopped, Retry, Snooze
from dataloader.model.storable import MAX_JSON_DEPTH, encode_json
from dataloader.workers.outcome import Decision, decide

BACKOFF = 42.0
STOPS = [None, "shutdown", "cancel", "lease_lost", "timeout"]

# name -> (returned, raised, interrupted)
ENDINGS: dict[str, tuple[Any, BaseException | None, bool]] = {
    "return_none": (None, None, False),
    "return_value": ({"rows": 3}, None, False),
    "return_bad_value": ({"x": float("nan")}, None, False),
    "return_snooze": (Snooze(5), None, False),
    "return_retry": (Retry(7), None, False),
    "return_retry_backoff": (Retry(), None, False),
    "return_cancel": (Cancel("no longer needed"), None, False),
    "raise_error": (None, ValueError("boom"), False),
    "raise_fatal": (None, FatalError("bad input"), False),
    "raise_stopped": (None, JobStopped("x"), False),
    "raise_snooze": (None, Snooze(5), False),
    "raise_retry": (None, Retry(timedelta(seconds=7)), False),
    "raise_cancel": (None, Cancel("no longer needed"), False),
    "interrupted": (None, None, True),
}


def expected(stop: str | None, seen: bool, ending: str, left: int) -> tuple[str, str, float, str | None]:
    """(kind, finish outcome, delay, journal reason), from the README's rules."""
    # 1. A lost lease: nothing of the attempt counts, whatever it did.
    if stop == "lease_lost":
        return ("release", "release", 0.0, "lease_lost")
    # 2. An explicit Cancel ends the job canceled, stop or no stop.
    if ending in ("return_cancel", "raise_cancel"):
        return ("canceled", "canceled", 0.0, None)
    # 3. Stopped: by the engine (JobStopped, interrupted), or it returned after seeing the stop.
    stopped = ending in ("raise_stopped", "interrupted") or (
        seen and ending in ("return_none", "return_value", "return_bad_value"))
    # 3b. Past the run-time limit: stopped, or an error raised as it was stopped, is a timeout
    # (an error like any other: retried or failed by the budget, reason "timeout"). A pipeline
    # that returned without seeing the stop finished its work; its own outcomes still decide.
    if stop == "timeout" and (stopped or ending in ("raise_error", "return_bad_value")):
        return ("retry", "error", BACKOFF, "timeout") if left else ("failed", "error", 0.0, "timeout")
    if stop is not None and stopped:
        return ("canceled", "canceled", 0.0, None) if stop == "cancel" else ("release", "release", 0.0, "shutdown")
    # 4. A requested cancel wins over a snooze or a retry.
    if stop == "cancel" and ending in ("return_snooze", "raise_snooze", "return_retry", "raise_retry",
                                       "return_retry_backoff"):
        return ("canceled", "canceled", 0.0, None)
    if ending in ("return_snooze", "raise_snooze"):
        return ("snooze", "release", 5.0, "snooze")
    if ending in ("return_retry", "raise_retry", "return_retry_backoff"):
        delay = BACKOFF if ending == "return_retry_backoff" else 7.0
        return ("retry" if left else "failed", "error", delay, None)
    if ending in ("return_none", "return_value"):
        return ("succeeded", "succeeded", 0.0, None)
    # 5. Errors (an unstorable result is one): fatal fails now; a pending cancel cancels; else retry.
    if ending == "raise_fatal":
        return ("failed", "error", 0.0, None)
    if stop == "cancel":
        return ("canceled", "error", 0.0, None)
    return ("retry", "error", BACKOFF, None) if left else ("failed", "error", 0.0, None)


CASES = list(itertools.product(STOPS, [False, True], ENDINGS, [0, 2]))


@pytest.mark.parametrize(("stop", "seen", "ending", "left"), CASES)
def test_every_combination_follows_the_rules(stop, seen, ending, left):
    returned, raised, interrupted = ENDINGS[ending]
    d = decide(stop_reason=stop, stop_seen=seen, interrupted=interrupted, returned=returned, raised=raised,
               attempts_left=left, backoff=lambda: BACKOFF)
    assert (d.kind, d.outcome, d.delay_sec, d.reason) == expected(stop, seen, ending, left)
    assert d.fatal == (ending == "raise_fatal" and stop != "lease_lost")
    # a result is stored only by a success, and only a value's
    assert d.result_json == ('{"rows": 3}' if d.kind == "succeeded" and ending == "return_value" else None)


@pytest.mark.parametrize(("stop", "seen", "ending", "left"), CASES)
def test_a_committed_transaction_decides_whatever_happened_after_it(stop, seen, ending, left):
    returned, raised, interrupted = ENDINGS[ending]
    d = decide(stop_reason=stop, stop_seen=seen, interrupted=interrupted, returned=returned, raised=raised,
               attempts_left=left, backoff=lambda: BACKOFF, committed=True)
    assert (d.kind, d.outcome, d.journal) == ("committed", "committed", "done")


def test_the_backoff_is_asked_only_when_an_error_will_retry():
    calls: list[int] = []

    def backoff() -> float:
        calls.append(1)
        return 3.0

    assert decide(stop_reason=None, stop_seen=False, raised=ValueError(), attempts_left=0,
                  backoff=backoff).kind == "failed"
    assert decide(stop_reason=None, stop_seen=False, raised=FatalError(), attempts_left=3,
                  backoff=backoff).kind == "failed"
    assert decide(stop_reason=None, stop_seen=False, returned=Retry(1), attempts_left=3,
                  backoff=backoff).delay_sec == 1.0
    assert calls == []
    assert decide(stop_reason=None, stop_seen=False, raised=ValueError(), attempts_left=1,
                  backoff=backoff).delay_sec == 3.0
    assert calls == [1]


@pytest.mark.parametrize(("returned", "raised", "interrupted", "decision"), [
    (None, None, False, Decision("succeeded", "succeeded")),
    ("done", None, False, Decision("succeeded", "succeeded", result_json='"done"')),
    (None, ValueError("boom"), False, Decision("retry", "error", delay_sec=BACKOFF, error="ValueError: boom")),
    (None, FatalError("bad"), False, Decision("failed", "error", error="FatalError: bad", fatal=True)),
    (Cancel("superseded"), None, False, Decision("canceled", "canceled", error="superseded")),
    (None, Snooze(timedelta(minutes=2)), False, Decision("snooze", "release", delay_sec=120.0, reason="snooze")),
    (Retry(9, reason="rate limited"), None, False,
     Decision("retry", "error", delay_sec=9.0, error="Retry: rate limited")),
    (None, None, True, Decision("retry", "error", delay_sec=BACKOFF, error="JobStopped: None")),
])
def test_exact_decisions_without_a_stop(returned, raised, interrupted, decision):
    d = decide(stop_reason=None, stop_seen=False, interrupted=interrupted, returned=returned, raised=raised,
               attempts_left=1, backoff=lambda: BACKOFF)
    assert d == decision


@pytest.mark.parametrize(("raised", "interrupted", "left", "decision"), [
    (None, True, 1, Decision("retry", "error", delay_sec=BACKOFF, error="run time limit of 2.5 s exceeded",
                             reason="timeout")),
    (JobStopped("timeout"), False, 0, Decision("failed", "error", error="run time limit of 2.5 s exceeded",
                                               reason="timeout")),
    (ValueError("closed"), False, 0, Decision("failed", "error", reason="timeout",
                                              error="run time limit of 2.5 s exceeded; then ValueError: closed")),
    (FatalError("bad"), False, 1, Decision("failed", "error", error="FatalError: bad", fatal=True)),
])
def test_exact_timeout_decisions(raised, interrupted, left, decision):
    d = decide(stop_reason="timeout", stop_seen=False, interrupted=interrupted, raised=raised, attempts_left=left,
               backoff=lambda: BACKOFF, timeout_sec=2.5)
    assert d == decision
    assert d.journal == ("requeue" if d.kind == "retry" else "failed")


def test_journal_rows_by_kind():
    assert {kind: Decision(kind, "error").journal for kind in
            ("succeeded", "committed", "canceled", "failed", "retry", "release", "snooze")} == {
        "succeeded": "done", "committed": "done", "canceled": "canceled", "failed": "failed",
        "retry": "requeue", "release": "requeue", "snooze": "requeue"}


def test_a_cancel_stop_keeps_the_pipelines_own_cancel_reason():
    d = decide(stop_reason="cancel", stop_seen=True, raised=Cancel("duplicate order"), attempts_left=1,
               backoff=lambda: BACKOFF)
    assert (d.kind, d.error) == ("canceled", "duplicate order")


@pytest.mark.parametrize(("value", "problem"), [
    ({1, 2}, "not JSON-serialisable"),
    (object(), "not JSON-serialisable"),
    (float("inf"), "not JSON-serialisable"),
    ({"s": "a\x00b"}, "NUL"),
    ("\ud800", "surrogates"),
    ("x" * 2000, "the limit is 1000"),
    pytest.param(10 ** 5000, "not JSON-serialisable", id="int-over-4300-digits"),
])
def test_unstorable_results_fail_the_attempt_with_a_clear_error(value, problem):
    text, why = encode_json(value, 1000)
    assert text is None and why is not None and problem in why
    d = decide(stop_reason=None, stop_seen=False, returned=value, attempts_left=1, backoff=lambda: 1.0,
               max_result_bytes=1000)
    assert d.kind == "retry" and d.result_json is None
    assert d.error is not None and d.error.startswith("ValueError: the pipeline's return value cannot be stored")


def test_deep_and_circular_results_are_refused():
    deep: Any = 1
    for _ in range(MAX_JSON_DEPTH + 1):
        deep = [deep]
    assert "nests deeper" in (encode_json(deep, 10 ** 6)[1] or "")
    ok: Any = 1
    for _ in range(MAX_JSON_DEPTH):
        ok = [ok]
    assert encode_json(ok, 10 ** 6)[1] is None
    loop: list[Any] = []
    loop.append(loop)
    assert "not JSON-serialisable" in (encode_json(loop, 10 ** 6)[1] or "")


@pytest.mark.parametrize("value", [
    0, "", "done", [1, "a", None], {"rows": 3, "nested": {"ok": True}}, "text with \\u0000 spelled out",
    "ünïcode ✓", 1.5, False,
])
def test_storable_results_round_trip(value):
    text, why = encode_json(value, 10 ** 6)
    assert why is None and text is not None and json.loads(text) == value


def test_none_stores_null_without_encoding():
    assert encode_json(None, 0) == (None, None)


@pytest.mark.parametrize("make", [
    lambda: Snooze(float("nan")), lambda: Snooze(-1), lambda: Snooze(366 * 24 * 3600),
    lambda: Retry(math.inf), lambda: Retry(timedelta(days=-1)), lambda: Retry(timedelta(days=400)),
])
def test_outcome_seconds_are_validated_like_retry_delays(make):
    with pytest.raises(ValueError):
        make()


@pytest.mark.parametrize("make", [lambda: Snooze("5"), lambda: Retry(True), lambda: Snooze(None)])
def test_outcome_seconds_must_be_numbers(make):
    with pytest.raises(TypeError):
        make()


def test_outcomes_are_exported_and_are_exceptions():
    for name in ("Snooze", "Retry", "Cancel", "AttemptFenced", "JobOutcome"):
        assert name in dataloader.__all__
        assert issubclass(getattr(dataloader, name), Exception)
    assert issubclass(dataloader.AttemptFenced, JobStopped)
    assert dataloader.AttemptFenced().args == ("lease_lost",)


def test_a_cancelled_task_counts_as_stopped_by_the_engine():
    d = decide(stop_reason="shutdown", stop_seen=False, raised=asyncio.CancelledError(), attempts_left=1,
               backoff=lambda: BACKOFF)
    assert (d.kind, d.reason) == ("release", "shutdown")
