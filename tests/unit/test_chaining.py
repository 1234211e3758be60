"""Chains, restartable and unique jobs: the pure decisions (no database)."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest
from pydantic import ValidationError

from dataloader import Stage, Then
from dataloader.jobs.manager import JobRequest, unique_window_key
from dataloader.model.chain import stages_json
from dataloader.model.job import Chain, Job, JobStatus
from dataloader.workers.chaining import plan_next_jobs
from dataloader.workers.outcome import decide


def plan(**kw):
    options = {"queue": "etl", "lease_ttl_sec": 30, "planned": None, "then": None, "result": None,
               "max_args_bytes": 1000}
    options.update(kw)
    text = plan_next_jobs(**options)
    return json.loads(text) if text is not None else None


def test_the_first_planned_stage_runs_next_with_the_result_as_input_and_carries_the_rest():
    planned = json.loads(stages_json([Stage("b", {"x": 1}, queue="other"), Stage("c", then=[Stage("d")])], 1000))
    rows = plan(planned=planned, result={"rows": 7})
    assert len(rows) == 1
    row = rows[0]
    assert (row["task"], row["queue"], row["args"]) == ("b", "other", {"x": 1, "input": {"rows": 7}})
    assert row["lease_ttl_sec"] == 30 and row["lock_key"] == row["job_id"] and row["max_attempts"] == 5
    assert [s["task"] for s in row["chain_next"]] == ["c"] and row["chain_next"][0]["then"] == [{"task": "d"}]


def test_no_result_means_no_input_and_no_plan_means_no_rows():
    planned = json.loads(stages_json([Stage("b", {"x": 1})], 1000))
    assert plan(planned=planned)[0]["args"] == {"x": 1}
    assert plan() is None
    assert stages_json([], 1000) is None


def test_a_returned_then_replaces_the_plan_and_fans_out_with_each_stage_s_own_then():
    planned = json.loads(stages_json([Stage("planned")], 1000))
    rows = plan(planned=planned, then=Then(Stage("a", {"p": 1}), Stage("b", then=[Stage("c")]), result=1),
                pipeline_max_attempts=lambda task: 9 if task == "a" else None)
    assert [(r["task"], r["args"], r["max_attempts"]) for r in rows] == [("a", {"p": 1}, 9), ("b", {}, 5)]
    assert rows[0]["chain_next"] is None and rows[1]["chain_next"] == [{"task": "c"}]
    assert rows[0]["queue"] == "etl"


@pytest.mark.parametrize("planned", [{"not": "a list"}, [{"nope": 1}], [{"task": ""}], "not json"])
def test_a_plan_the_engine_cannot_use_is_a_value_error(planned):
    with pytest.raises(ValueError):
        plan(planned=planned, result=1)


def test_stage_args_that_cannot_be_stored_are_a_value_error_naming_the_stage():
    with pytest.raises(ValueError, match="'big'"):
        plan(then=Then(Stage("big", {"x": "y" * 2000})))
    with pytest.raises(ValueError, match="NUL"):
        stages_json([Stage("nul", {"x": "\x00"})], 1000)
    planned = json.loads(stages_json([Stage("b", {"x": 1})], 1000))
    with pytest.raises(ValueError, match="args cannot be stored"):
        plan(planned=planned, result="z" * 2000)  # the input pushes the args past the limit


def test_stage_and_then_refuse_bad_values():
    for bad in ({"priority": -1}, {"delay_sec": float("inf")}, {"max_attempts": 0}, {"queue": ""},
                {"task": "a\x00"}, {"task": "  "}, {"queue": "\ud800"}, {"unknown": 1}):
        with pytest.raises(ValidationError):
            Stage(**{"task": "t", **bad})
    with pytest.raises(ValueError):
        Then()
    with pytest.raises(TypeError):
        Then("not a stage")  # type: ignore[arg-type]


def test_decide_succeeds_with_the_then_result_and_its_next_jobs():
    seen = {}

    def plan_next(then, result):
        seen["then"], seen["result"] = then, result
        return "[]"

    then = Then(Stage("b"), result={"ok": True})
    d = decide(stop_reason=None, stop_seen=False, returned=then, attempts_left=3, backoff=lambda: 1.0,
               plan_next=plan_next)
    assert (d.kind, d.result_json, d.next_json, d.next_stages) == ("succeeded", '{"ok": true}', "[]", then.stages)
    assert seen == {"then": then, "result": {"ok": True}}


def test_decide_fails_the_attempt_when_the_next_stages_cannot_be_enqueued():
    def plan_next(then, result):
        raise ValueError("stage 'b': too big")

    retry = decide(stop_reason=None, stop_seen=False, returned=1, attempts_left=3, backoff=lambda: 2.0,
                   plan_next=plan_next)
    assert retry.kind == "retry" and "next stages cannot be enqueued: stage 'b'" in retry.error
    last = decide(stop_reason=None, stop_seen=False, returned=1, attempts_left=0, backoff=lambda: 2.0,
                  plan_next=plan_next)
    assert last.kind == "failed"


def test_a_cancel_still_wins_over_a_returned_then_that_saw_the_stop():
    d = decide(stop_reason="cancel", stop_seen=True, returned=Then(Stage("b")), attempts_left=3,
               backoff=lambda: 1.0, plan_next=lambda then, result: "[]")
    assert d.kind == "canceled" and d.next_json is None


def request(**kw) -> JobRequest:
    return JobRequest(queue="q", task="t", lock_key="k", **kw)


def test_unique_windows_align_to_the_epoch_and_key_on_task_queue_and_args_or_unique_key():
    hour = request(args={"a": 1}, unique_for_sec=3600)
    at = datetime(2026, 11, 22, 10, 0, 0, tzinfo=UTC)
    same_window = unique_window_key(hour, datetime(2026, 11, 22, 10, 59, 59, tzinfo=UTC))
    assert unique_window_key(hour, at) == same_window
    assert unique_window_key(hour, datetime(2026, 11, 22, 11, 0, 0, tzinfo=UTC)) != same_window
    assert unique_window_key(request(args={"a": 2}, unique_for_sec=3600), at) != same_window
    assert unique_window_key(request(args={"a": 1}, unique_for_sec=60), at) != same_window
    assert unique_window_key(JobRequest(queue="q2", task="t", lock_key="k", args={"a": 1}, unique_for_sec=3600),
                             at) != same_window
    # key order in the args does not matter; a unique_key replaces the args
    assert unique_window_key(request(args={"b": 1, "a": 2}, unique_for_sec=60), at) == \
        unique_window_key(request(args={"a": 2, "b": 1}, unique_for_sec=60), at)
    assert unique_window_key(request(args={"a": 1}, unique_for_sec=60, unique_key="u"), at) == \
        unique_window_key(request(args={"a": 9}, unique_for_sec=60, unique_key="u"), at)


@pytest.mark.parametrize("fields", [
    {"restartable": True, "idempotency_key": "i"},
    {"unique_for_sec": 60, "idempotency_key": "i"},
    {"unique_for_sec": 60, "restartable": True},
    {"unique_key": "u"},
    {"unique_for_sec": 0},
    {"unique_key": "a\x00", "unique_for_sec": 60},
])
def test_one_meaning_per_key(fields):
    with pytest.raises(ValidationError):
        request(**fields)


def job(status: str, n: int = 0) -> Job:
    now = datetime(2026, 1, 1, tzinfo=UTC)
    import uuid
    return Job(id=uuid.uuid4(), queue="q", task=f"t{n}", args=None, lock_key="k", status=JobStatus(status),
               attempt=1, max_attempts=5, priority=100, available_at=now, created_at=now)


@pytest.mark.parametrize(("statuses", "expected"), [
    (["succeeded", "succeeded"], "succeeded"),
    (["succeeded", "running"], "running"),
    (["succeeded", "queued", "queued"], "running"),
    (["succeeded", "failed"], "failed"),
    (["succeeded", "succeeded", "canceled"], "canceled"),
    (["succeeded", "lost", "running"], "running"),
])
def test_a_chain_s_status(statuses, expected):
    chain = Chain(job("succeeded").id, [job(s, i) for i, s in enumerate(statuses)])
    assert chain.status == expected
    assert [s["status"] for s in chain.to_dict()["stages"]] == statuses


def test_a_stray_holder_is_held_back_short_first_then_up_to_the_claim_backoff():
    from dataloader.workers.queue_worker import stray_hold_back

    assert [stray_hold_back(n, 15) for n in range(6)] == [0.2, 0.8, 3.2, 12.8, 15, 15]
    assert stray_hold_back(10**6, 15) == 15 and stray_hold_back(0, 0) == 0
