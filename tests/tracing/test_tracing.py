"""OpenTelemetry traces (issue 23), recorded with the SDK's in-memory exporter: the caller's span is
stored with the job at enqueue (HTTP `traceparent` header, or the current span in Python), each
attempt is a CONSUMER span in that trace with `wait`, `run` and `finish` children, a retry's next
attempt is another such span in the same trace linked to the failed one, and a job's log lines
carry the trace id. With no
provider configured nothing is recorded or stored and the job runs as before."""

from __future__ import annotations

import asyncio
import json
import logging
import math
import signal
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager

import asyncpg
import httpx
import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import SpanKind, StatusCode

from dataloader import App, Queue, Stage, tracing
from dataloader.api import create_app
from dataloader.config import Settings
from dataloader.logger.logger import JsonFormatter
from dataloader.testing import drain
from tests.conftest import wait_until
from tests.support.engine import WorkerProcess
from tests.support.pipelines import GATES

CALLER_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
CALLER_SPAN = "00f067aa0ba902b7"
TRACEPARENT = f"00-{CALLER_TRACE}-{CALLER_SPAN}-01"


@pytest.fixture
async def app(db: asyncpg.Pool, dsn: str) -> AsyncIterator[App]:
    settings = Settings(db_dsn=dsn, workers=[Queue("q", 2)], pipeline_modules="tests.support.pipelines",
                        heartbeat_sec=0.2, poll_fallback_sec=1, shutdown_timeout_sec=2)
    async with App(settings) as opened:
        yield opened


def client_for(app: App) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=create_app(app.settings, context=app)),
                             base_url="http://dataloader.test")


def hex_trace(span: ReadableSpan) -> str:
    return f"{span.context.trace_id:032x}"


def ancestors(span: ReadableSpan, by_id: dict[int, ReadableSpan]) -> list[int]:
    """The span ids above `span` that were recorded here (the caller's own span was not)."""
    found = []
    while span.parent is not None and span.parent.span_id in by_id:
        found.append(span.parent.span_id)
        span = by_id[span.parent.span_id]
    return found


def children(of: ReadableSpan, finished: list[ReadableSpan]) -> dict[str, ReadableSpan]:
    return {s.name: s for s in finished if s.parent is not None and s.parent.span_id == of.context.span_id}


async def trigger(app: App, body: dict[str, object], headers: dict[str, str] | None = None) -> uuid.UUID:
    async with client_for(app) as client:
        response = await client.post("/api/v1/jobs/trigger", json=body, headers=headers or {})
    assert response.status_code in (200, 201), response.text
    return uuid.UUID(response.json()["job_id"])


async def test_an_http_trigger_and_the_run_it_causes_are_one_trace(app: App, db: asyncpg.Pool, spans):
    job_id = await trigger(app, {"queue": "q", "task": "dl.noop"}, {"traceparent": TRACEPARENT})
    result = await drain(app, "q", timeout=30)
    assert [j.id for j in result.succeeded] == [job_id]

    recorded = list(spans.get_finished_spans())
    # Other activity of this process may be recorded too (in a full run, something an earlier test
    # of this worker left in its database - an observer, a schedule - runs in this test's app, in
    # traces of its own): none of it may be this request or this job. Everything else is checked on
    # the caller's trace alone.
    finished = [s for s in recorded if hex_trace(s) == CALLER_TRACE]
    strays = [(s.name, hex_trace(s)[:8], s.kind.name, dict(s.attributes or {})) for s in recorded
              if hex_trace(s) != CALLER_TRACE]
    assert not [s for s in strays if s[2] in ("SERVER", "CONSUMER") or s[3].get("messaging.message.id") == str(job_id)
                or s[0] in ("wait", "finish", "run dl.noop") or s[0].startswith("fastapi.")], strays
    # the request's SERVER span (FastAPI's telemetry), a child of the caller's span
    (server,) = [s for s in finished if s.kind == SpanKind.SERVER]
    assert server.name == "POST /api/v1/jobs/trigger"
    assert f"{server.parent.span_id:016x}" == CALLER_SPAN
    assert server.attributes["http.response.status_code"] == 201
    # the job stores the span its trigger ran in (the endpoint's, inside the server span): the run's parent
    (run,) = [s for s in finished if s.kind == SpanKind.CONSUMER]
    by_id = {s.context.span_id: s for s in finished}
    assert server.context.span_id in ancestors(run, by_id)
    stored = await db.fetchval("SELECT traceparent FROM dl_jobs WHERE job_id = $1", job_id)
    assert stored == f"00-{CALLER_TRACE}-{run.parent.span_id:016x}-01"
    assert run.name == "process q"
    assert dict(run.attributes) == {
        "messaging.system": "dataloader", "messaging.operation.type": "process",
        "messaging.destination.name": "q", "messaging.message.id": str(job_id),
        "dataloader.job.task": "dl.noop", "dataloader.job.attempt": 1, "dataloader.job.outcome": "succeeded"}
    steps = children(run, finished)
    assert set(steps) == {"wait", "run dl.noop", "finish"}
    assert steps["wait"].start_time == run.start_time and steps["wait"].end_time <= steps["run dl.noop"].start_time
    assert steps["finish"].attributes["dataloader.job.status"] == "succeeded"
    assert run.start_time <= steps["finish"].start_time <= steps["finish"].end_time <= run.end_time


async def test_a_retried_job_has_one_span_per_attempt_in_the_producers_trace(app: App, spans):
    with tracing.tracer().start_as_current_span("producer") as producer:
        job = await app.enqueue("test.flaky", {"succeed_on": 2}, queue="q")
    result = await drain(app, "q", timeout=30)
    assert [j.id for j in result.succeeded] == [job.id]

    finished = list(spans.get_finished_spans())
    attempts = sorted((s for s in finished if s.kind == SpanKind.CONSUMER),
                      key=lambda s: s.attributes["dataloader.job.attempt"])
    assert [s.attributes["dataloader.job.attempt"] for s in attempts] == [1, 2]
    assert {s.parent.span_id for s in attempts} == {producer.get_span_context().span_id}
    assert {s.context.trace_id for s in attempts} == {producer.get_span_context().trace_id}
    first, second = attempts
    assert first.attributes["dataloader.job.outcome"] == "retried" and first.status.status_code == StatusCode.ERROR
    assert second.attributes["dataloader.job.outcome"] == "succeeded"
    assert first.end_time <= second.start_time
    # the retry's attempt links to the attempt that failed (the link was stored by its finish)
    assert not first.links
    (link,) = second.links
    assert (link.context.trace_id, link.context.span_id) == (first.context.trace_id, first.context.span_id)
    assert link.attributes == {"dataloader.link": "previous_attempt"}
    failed_run = children(first, finished)["run test.flaky"]
    assert failed_run.status.status_code == StatusCode.ERROR
    assert [e.name for e in failed_run.events] == ["exception"]  # the pipeline's error, recorded
    assert children(first, finished)["finish"].attributes["dataloader.job.status"] == "queued"


async def test_enqueue_many_stores_the_current_span_on_every_job(app: App, db: asyncpg.Pool, spans):
    with tracing.tracer().start_as_current_span("producer") as producer:
        context = producer.get_span_context()
        ids = await app.enqueue_many([{"task": "dl.noop", "queue": "q"}, {"task": "dl.noop", "queue": "q"}])
    stored = await db.fetch("SELECT traceparent FROM dl_jobs WHERE job_id = ANY($1)", ids)
    assert [r["traceparent"] for r in stored] == [
        f"00-{context.trace_id:032x}-{context.span_id:016x}-{int(context.trace_flags):02x}"] * 2
    # outside any span: nothing stored
    job = await app.enqueue("dl.noop", queue="q")
    assert await db.fetchval("SELECT traceparent FROM dl_jobs WHERE job_id = $1", job.id) is None


async def test_a_jobs_log_lines_carry_its_trace_and_span_ids(app: App, spans):
    lines: list[dict[str, object]] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            lines.append(json.loads(JsonFormatter().format(record)))  # formatted where it is logged

    worker_log = logging.getLogger("dataloader.worker")
    handler, level = Keep(), worker_log.level
    worker_log.addHandler(handler)
    worker_log.setLevel(logging.INFO)
    try:
        job_id = await trigger(app, {"queue": "q", "task": "dl.noop"}, {"traceparent": TRACEPARENT})
        await drain(app, "q", timeout=30)
    finally:
        worker_log.removeHandler(handler)
        worker_log.setLevel(level)
    job_lines = [line for line in lines if line.get("job_id") == str(job_id)]
    assert {line["message"] for line in job_lines} >= {"job started", "job succeeded"}
    (run,) = [s for s in spans.get_finished_spans() if s.kind == SpanKind.CONSUMER]
    assert {line["trace_id"] for line in job_lines} == {CALLER_TRACE}
    assert {line["span_id"] for line in job_lines} == {f"{run.context.span_id:016x}"}


@contextmanager
def worker_lines() -> Iterator[list[dict[str, object]]]:
    """The `dataloader.worker` log lines written in the block, each formatted where it is logged."""
    lines: list[dict[str, object]] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            lines.append(json.loads(JsonFormatter().format(record)))

    worker_log = logging.getLogger("dataloader.worker")
    handler, level = Keep(), worker_log.level
    worker_log.addHandler(handler)
    worker_log.setLevel(logging.INFO)
    try:
        yield lines
    finally:
        worker_log.removeHandler(handler)
        worker_log.setLevel(level)


async def test_a_run_whose_finish_shares_a_step_with_a_heartbeat_logs_nothing_outside_its_trace(app: App, db, spans):
    """The fresh-clone CI failure of the worker-process test (KeyError 'trace_id' under load): the
    step that wrote an attempt's finish also heartbeat, found the just-finished job no longer
    running and asked the attempt to stop for a lost lease, a "stop requested" line logged from
    the worker's loop, outside the attempt's trace. Here the heartbeat is made due while the
    pipeline runs (the worker's loop is asleep: a long DL_HEARTBEAT_SEC), so the step that writes
    the finish is the one that beats, at any load."""
    gate = GATES["heartbeat-and-finish"] = (asyncio.Event(), asyncio.Event())
    try:
        with worker_lines() as lines:
            async with app.running(queues=[Queue("q", 1)], reaper=False) as manager:
                with tracing.tracer().start_as_current_span("producer") as producer:
                    job = await app.enqueue("test.gated", {"gate": "heartbeat-and-finish"}, queue="q")
                await asyncio.wait_for(gate[0].wait(), 30)
                manager.workers["q"].heartbeats.next_at = -math.inf  # due, without waking the loop
                gate[1].set()
                await wait_until(lambda: db.fetchval("SELECT status = 'succeeded' FROM dl_jobs WHERE job_id = $1",
                                                     job.id), timeout=30, message="the gated job did not finish")
    finally:
        del GATES["heartbeat-and-finish"]
    job_lines = [line for line in lines if line.get("job_id") == str(job.id)]
    trace_id = f"{producer.get_span_context().trace_id:032x}"
    assert [line["message"] for line in job_lines] == ["job started", "job succeeded"]
    assert [line.get("trace_id") for line in job_lines] == [trace_id] * 2


async def test_a_stop_requested_from_outside_the_attempt_is_logged_in_its_trace(app: App, db, spans):
    """A stop request comes from the worker's loop (a cancel seen by the heartbeat or a NOTIFY, a
    lost lease, a shutdown): its line names the job and carries the job's trace and span."""
    gate = GATES["stop-from-outside"] = (asyncio.Event(), asyncio.Event())
    try:
        with worker_lines() as lines:
            async with app.running(queues=[Queue("q", 1)], reaper=False):
                with tracing.tracer().start_as_current_span("producer"):
                    job = await app.enqueue("test.gated", {"gate": "stop-from-outside"}, queue="q")
                await asyncio.wait_for(gate[0].wait(), 30)
                await app.cancel(job.id)
                await wait_until(lambda: db.fetchval("SELECT status = 'canceled' FROM dl_jobs WHERE job_id = $1",
                                                     job.id), timeout=30, message="the gated job was not canceled")
    finally:
        del GATES["stop-from-outside"]
    (run,) = [s for s in spans.get_finished_spans() if s.kind == SpanKind.CONSUMER]
    job_lines = [line for line in lines if line.get("job_id") == str(job.id)]
    assert "stop requested" in [line["message"] for line in job_lines], job_lines
    assert {(line.get("trace_id"), line.get("span_id")) for line in job_lines} == {
        (f"{run.context.trace_id:032x}", f"{run.context.span_id:016x}")}, job_lines


def test_a_line_about_a_job_outside_its_attempts_carries_the_jobs_stored_trace(spans):
    """A claimed job put back without running (its lock_key held by this worker) is logged from the
    worker's loop: its line takes the trace id from the job's stored traceparent."""
    assert tracing.job_trace_ids(TRACEPARENT) == {"trace_id": CALLER_TRACE}
    assert tracing.job_trace_ids(None) == {} and tracing.job_trace_ids("garbage") == {}


async def test_with_no_provider_nothing_is_traced_or_stored_and_jobs_run(app: App, db: asyncpg.Pool):
    assert not tracing.enabled()
    job_id = await trigger(app, {"queue": "q", "task": "test.flaky", "args": {"succeed_on": 2}},
                           {"traceparent": TRACEPARENT})
    with trace.get_tracer("t").start_as_current_span("producer"):  # a no-op span of the API
        job = await app.enqueue("dl.noop", queue="q")
    result = await drain(app, "q", timeout=30)
    assert sorted(j.id for j in result.succeeded) == sorted([job_id, job.id])
    stored = await db.fetch("SELECT traceparent FROM dl_jobs WHERE job_id = ANY($1)", [job_id, job.id])
    assert [r["traceparent"] for r in stored] == [None, None]
    assert tracing.current_traceparent() is None and tracing.log_ids() == {}


def printed_objects(text: str) -> list[dict[str, object]]:
    """The JSON objects a worker printed: its one-line log records and the console exporter's
    indented spans, in order."""
    decoder, found, at = json.JSONDecoder(), [], 0
    while (at := text.find("{", at)) != -1:
        try:
            obj, end = decoder.raw_decode(text, at)
        except json.JSONDecodeError:
            at += 1
            continue
        found.append(obj)
        at = end
    return found


@pytest.fixture
def traced_worker(subprocess_env: dict[str, str]) -> Iterator[WorkerProcess]:
    """`python -m dataloader worker` exporting its spans with OTEL_TRACES_EXPORTER=console."""
    env = {**subprocess_env, "OTEL_TRACES_EXPORTER": "console", "OTEL_SERVICE_NAME": "dl-worker"}
    worker = WorkerProcess(env, queues={"q": 2}, heartbeat_sec=0.2).start()
    try:
        yield worker
    finally:
        worker.close()


async def test_a_trigger_and_its_run_in_a_worker_process_are_one_trace(app: App, db: asyncpg.Pool, spans,
                                                                       traced_worker: WorkerProcess):
    """The HTTP trigger in this process, the job's two attempts (the first fails) in a real
    `python -m dataloader worker` that exports with OTEL_TRACES_EXPORTER=console."""
    worker = traced_worker
    job_id = await trigger(app, {"queue": "q", "task": "test.flaky", "args": {"succeed_on": 2}},
                           {"traceparent": TRACEPARENT})
    await wait_until(lambda: db.fetchval("SELECT status = 'succeeded' FROM dl_jobs WHERE job_id = $1", job_id),
                     timeout=30, message="the worker process did not run the job")
    worker.signal(signal.SIGTERM)
    assert await worker.wait_exit() == 0, worker.log()

    stored = await db.fetchval("SELECT traceparent FROM dl_jobs WHERE job_id = $1", job_id)
    (server,) = [s for s in spans.get_finished_spans() if s.kind == SpanKind.SERVER]
    printed = printed_objects(worker.log())
    exported = [o for o in printed if "context" in o and "kind" in o]
    attempts = sorted((s for s in exported if s["kind"] == "SpanKind.CONSUMER"),
                      key=lambda s: s["attributes"]["dataloader.job.attempt"])
    assert [(s["name"], s["attributes"]["dataloader.job.attempt"], s["attributes"]["dataloader.job.outcome"])
            for s in attempts] == [("process q", 1, "retried"), ("process q", 2, "succeeded")]
    assert {s["context"]["trace_id"] for s in exported} == {f"0x{CALLER_TRACE}"}
    assert {s["parent_id"] for s in attempts} == {f"0x{stored.split('-')[2]}"}  # the trigger's span
    assert [link["context"]["span_id"] for link in attempts[1]["links"]] == [attempts[0]["context"]["span_id"]]
    assert f"{server.context.trace_id:032x}" == CALLER_TRACE
    assert {s["resource"]["attributes"]["service.name"] for s in exported} == {"dl-worker"}
    job_lines = [o for o in printed if o.get("job_id") == str(job_id)]
    assert job_lines and {line["trace_id"] for line in job_lines} == {CALLER_TRACE}


async def test_a_chains_next_stage_runs_as_a_child_of_the_attempt_that_enqueued_it(app: App, db: asyncpg.Pool,
                                                                                   spans):
    with tracing.tracer().start_as_current_span("producer") as producer:
        first = await app.enqueue("dl.noop", queue="q", then=[Stage("dl.noop")])
    result = await drain(app, "q", timeout=30)
    assert len(result.succeeded) == 2

    runs = {s.attributes["messaging.message.id"]: s for s in spans.get_finished_spans() if s.kind == SpanKind.CONSUMER}
    (stage_id,) = set(runs) - {str(first.id)}
    assert runs[str(first.id)].parent.span_id == producer.get_span_context().span_id
    assert runs[stage_id].parent.span_id == runs[str(first.id)].context.span_id
    assert {s.context.trace_id for s in runs.values()} == {producer.get_span_context().trace_id}


async def test_a_schedule_tick_is_the_root_of_the_trace_of_the_job_it_enqueued(app: App, db: asyncpg.Pool, spans):
    await app.schedules.create(app.schedules.spec(name="traced-tick", task="dl.noop", queue="q", every_sec=1))
    async with app.running():
        async def ran() -> list[ReadableSpan]:
            return [s for s in spans.get_finished_spans() if s.kind == SpanKind.CONSUMER]

        attempt = (await wait_until(ran, message="a scheduled job to run"))[0]
    await app.schedules.delete("traced-tick")
    finished = list(spans.get_finished_spans())
    ticks = {s.context.span_id: s for s in finished if s.name == "schedule traced-tick"}
    tick = ticks[attempt.parent.span_id]
    assert tick.kind == SpanKind.PRODUCER and tick.parent is None
    assert tick.attributes["dataloader.schedule.name"] == "traced-tick"
    assert attempt.context.trace_id == tick.context.trace_id
    job_id = uuid.UUID(attempt.attributes["messaging.message.id"])
    assert await db.fetchval("SELECT traceparent FROM dl_jobs WHERE job_id = $1", job_id) == tracing.traceparent_of(
        tick)
