"""A workflow run's metrics and its one trace: every attempt of the run (each replay after a sleep or
a step's backoff) and every child run of a gather are in the trace its start began, each step
function ran in a span of its own, and the counters say how steps ended and why runs handed back."""

from __future__ import annotations

from typing import Any

import asyncpg
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import StatusCode
from prometheus_client import REGISTRY

from dataloader import App


def sample(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


def by_name(finished: list[ReadableSpan], prefix: str) -> list[ReadableSpan]:
    return [s for s in finished if s.name.startswith(prefix)]


async def test_a_run_is_one_trace_with_a_span_per_step_and_its_counters(app: App, wdb: asyncpg.Pool, dsn: str,
                                                                        spans: Any) -> None:
    retried = sample("dl_workflow_steps_total", workflow="t.flaky", outcome="retried")
    succeeded = sample("dl_workflow_steps_total", workflow="t.flaky", outcome="succeeded")
    suspends = sample("dl_workflow_suspends_total", workflow="t.flaky", reason="retry")
    durations = sample("dl_workflow_step_duration_seconds_count", workflow="t.flaky")
    async with app.running():
        run_id = await app.workflows.start("t.flaky", {"dsn": dsn, "succeed_on": 3})
        assert await app.workflows.result(run_id, timeout=20) == {"value": 3}
        gathered = await app.workflows.start("t.gather", {"dsn": dsn, "modes": ["ok", "ok"]})
        await app.workflows.result(gathered, timeout=30)
    assert sample("dl_workflow_steps_total", workflow="t.flaky", outcome="retried") - retried == 2
    assert sample("dl_workflow_steps_total", workflow="t.flaky", outcome="succeeded") - succeeded == 1
    assert sample("dl_workflow_suspends_total", workflow="t.flaky", reason="retry") - suspends == 2
    assert sample("dl_workflow_step_duration_seconds_count", workflow="t.flaky") - durations == 3

    finished = spans.get_finished_spans()
    start = next(s for s in by_name(finished, "workflow start t.flaky")
                 if s.attributes["messaging.message.id"] == str(run_id))
    trace_id = start.context.trace_id
    attempts = [s for s in finished if s.name.startswith("process ") and s.attributes.get("messaging.message.id")
                == str(run_id)]
    assert len(attempts) == 3  # two backoffs: three replays, one trace
    assert {s.context.trace_id for s in attempts} == {trace_id}
    assert {s.parent.span_id for s in attempts} == {start.context.span_id}
    steps = [s for s in by_name(finished, "step flaky") if s.context.trace_id == trace_id]
    assert [s.attributes["dataloader.workflow.step_attempt"] for s in steps] == [1, 2, 3]
    assert [s.status.status_code for s in steps] == [StatusCode.ERROR, StatusCode.ERROR, StatusCode.UNSET]
    # each step ran inside its own attempt: a different attempt for each of the three
    in_trace = {s.context.span_id: s for s in finished if s.context.trace_id == trace_id}

    def attempt_of(span: ReadableSpan) -> int:
        while span.parent is not None and span not in attempts:
            span = in_trace[span.parent.span_id]
        assert span in attempts, span.name
        return span.context.span_id

    assert len({attempt_of(s) for s in steps}) == 3

    # the children of a gather are in their parent's trace
    parent_start = next(s for s in by_name(finished, "workflow start t.gather")
                        if s.attributes["messaging.message.id"] == str(gathered))
    children = [s for s in finished if s.name.startswith("process ") and s.attributes.get("dataloader.job.task")
                == "workflow:t.child"]
    assert len(children) >= 2 and {s.context.trace_id for s in children} == {parent_start.context.trace_id}
