"""Process steps in traces (issue 23): a caller's `init` / `call` stores its span with the task, so
the step's attempt is a child of it, and the step itself is a span (`init <ns>`, `call <ns>`) with
the process's ns, id, task type and task id."""

from __future__ import annotations

from opentelemetry.trace import SpanKind

from dataloader import App, tracing
from tests.conftest import wait_until
from tests.processes.processors import register


async def test_init_and_call_are_steps_in_their_callers_traces(app: App, ns: str, spans):
    register(ns)
    async with app.running():
        with tracing.tracer().start_as_current_span("caller init") as init_caller:
            await app.processes.init(ns, "p1", {"n": 1})
        with tracing.tracer().start_as_current_span("caller call") as call_caller:
            await app.processes.call(ns, "p1", {"n": 2})

    finished = list(spans.get_finished_spans())
    by_id = {s.context.span_id: s for s in finished}
    steps = {s.name: s for s in finished if s.attributes.get("dataloader.process.ns") == ns}
    assert set(steps) == {f"init {ns}", f"call {ns}"}
    for kind, caller in (("init", init_caller), ("call", call_caller)):
        step = steps[f"{kind} {ns}"]
        assert step.attributes["dataloader.process.id"] == "p1"
        assert step.attributes["dataloader.process.task_type"] == kind
        run = by_id[step.parent.span_id]
        assert run.name == "run dl.process"
        attempt = by_id[run.parent.span_id]
        assert attempt.kind == SpanKind.CONSUMER and attempt.name == f"process process:{ns}"
        assert attempt.attributes["messaging.message.id"] == step.attributes["dataloader.process.task_id"]
        assert attempt.parent.span_id == caller.get_span_context().span_id
        assert attempt.context.trace_id == caller.get_span_context().trace_id


async def test_a_timer_runs_in_a_trace_of_its_own_linked_to_the_step_that_armed_it(app: App, ns: str, spans):
    register(ns)
    async with app.running():
        with tracing.tracer().start_as_current_span("caller init"):
            await app.processes.init(ns, "p1", {"n": 1, "timer": 0.2})  # arms a timeout 0.2 s on

        async def timed_out() -> bool:
            return any(s.attributes.get("dataloader.process.task_type") == "timeout"
                       for s in spans.get_finished_spans())

        await wait_until(timed_out, message="the timer to fire")

    finished = list(spans.get_finished_spans())
    by_id = {s.context.span_id: s for s in finished}
    init_step = next(s for s in finished if s.name == f"init {ns}")
    timeout_step = next(s for s in finished if s.name == f"timeout {ns}")
    attempt = by_id[by_id[timeout_step.parent.span_id].parent.span_id]
    assert attempt.kind == SpanKind.CONSUMER
    assert attempt.parent is None, "a timer starts a trace of its own"
    assert attempt.context.trace_id != init_step.context.trace_id
    (link,) = attempt.links
    assert (link.context.trace_id, link.context.span_id) == (init_step.context.trace_id, init_step.context.span_id)
    assert link.attributes == {"dataloader.link": "cause"}
