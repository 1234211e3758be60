"""dataloader.testing.run_inline decides outcomes with the engine's own function
(`workers/outcome.decide`): outcomes returned or raised, results, and the rules that pair them with
stop requests come out as the engine would write them."""

from __future__ import annotations

import pytest

import tests.support.pipelines  # noqa: F401  (registers test.* pipelines)
from dataloader import Cancel, Retry, Snooze
from dataloader.model.job import JobStatus
from dataloader.testing import run_inline


@pytest.mark.parametrize("task", ["test.outcome", "test.outcome_sync"])
def test_a_returned_value_is_the_result(task):
    result = run_inline(task, {"action": "value", "value": {"rows": [1, 2]}})
    assert (result.outcome, result.job_status, result.result) == ("succeeded", JobStatus.succeeded, {"rows": [1, 2]})


@pytest.mark.parametrize("how", ["return", "raise"])
def test_outcomes(how):
    snoozed = run_inline("test.outcome", {"action": "snooze", "seconds": 90, "how": how})
    assert (snoozed.outcome, snoozed.job_status, snoozed.retry_in_sec) == ("snoozed", JobStatus.queued, 90)
    assert isinstance(snoozed.error, Snooze)

    retried = run_inline("test.outcome", {"action": "retry", "seconds": 5, "how": how})
    assert (retried.outcome, retried.job_status, retried.retry_in_sec) == ("failed", JobStatus.queued, 5)
    assert isinstance(retried.error, Retry)
    # test.outcome allows 2 attempts: on the second a retry fails the job
    last = run_inline("test.outcome", {"action": "retry", "seconds": 5, "how": how}, attempt=2)
    assert (last.outcome, last.job_status) == ("failed", JobStatus.failed)

    canceled = run_inline("test.outcome", {"action": "cancel", "reason": "gone", "how": how})
    assert (canceled.outcome, canceled.job_status, str(canceled.error)) == ("canceled", JobStatus.canceled, "gone")
    assert isinstance(canceled.error, Cancel)


def test_an_unstorable_result_fails_the_attempt():
    result = run_inline("test.outcome", {"action": "unstorable"})
    assert (result.outcome, result.job_status, result.result) == ("failed", JobStatus.queued, None)
    assert "cannot be stored" in str(result.error) and "NUL" in str(result.error)


def test_a_result_over_the_size_limit_fails_the_attempt():
    result = run_inline("test.outcome", {"action": "value", "value": "x" * 100}, max_result_bytes=50)
    assert result.outcome == "failed" and "the limit is 50" in str(result.error)


def test_a_cancel_request_wins_over_a_snooze():
    result = run_inline("test.outcome", {"action": "snooze", "seconds": 90}, cancel=True)
    assert (result.outcome, result.job_status) == ("stopped", JobStatus.canceled)


def test_the_transaction_needs_the_engine():
    result = run_inline("test.tx_then_raise")
    assert result.outcome == "failed" and "ctx.transaction() needs the engine's database" in str(result.error)
