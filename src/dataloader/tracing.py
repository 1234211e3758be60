"""OpenTelemetry traces, optional: `pip install 'dataloader[otel]'` and configure a tracer
provider (in code, or with `configure_from_env()`, which the service commands call: OTEL_TRACES_EXPORTER
and the other standard OTEL_* variables).

Why a module of its own: the engine, the HTTP middleware and the enqueue path each ask one question
("is tracing on?") and this is the only place that knows OpenTelemetry. Off costs nothing on the hot
paths: when `opentelemetry.trace` was never imported nobody can have configured a provider, so the
check is one dict look-up and nothing is imported; when it was imported (FastAPI imports the API)
but no SDK provider is set, the check is one more call and an isinstance, and no span object is made.

What is traced (docs/observability.md): the caller's span context is stored on the job at enqueue
(`traceparent`, W3C format, migration 0020); each attempt of the job is a CONSUMER span
`process <queue>`, a child of that context (so an HTTP trigger and the run are one trace, across
processes), with child spans `wait` (queued → claimed, from the claim's own timing), `run <task>`
(the pipeline) and `finish` (the fenced write of its outcome). The HTTP API's SERVER span per request
(a child of the caller's `traceparent` header) is FastAPI's own telemetry (FastAPI >= 0.165 traces
every request when a provider is configured): the trigger's handler runs inside it, so the job
stores it.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

# Messaging semantic conventions (https://opentelemetry.io/docs/specs/semconv/messaging/).
SYSTEM = "dataloader"
ATTR_SYSTEM = "messaging.system"
ATTR_OPERATION = "messaging.operation.type"
ATTR_DESTINATION = "messaging.destination.name"
ATTR_MESSAGE_ID = "messaging.message.id"
ATTR_ATTEMPT = "dataloader.job.attempt"
ATTR_TASK = "dataloader.job.task"
ATTR_OUTCOME = "dataloader.job.outcome"
TRACER_NAME = "dataloader"


def _trace_module() -> Any:
    """`opentelemetry.trace` if something imported it (a provider can only be set through it)."""
    return sys.modules.get("opentelemetry.trace")


# The API loads a provider named by this variable on its first use; read once (it is set at start-up).
_ENV_PROVIDER = "OTEL_PYTHON_TRACER_PROVIDER" in os.environ
_UNKNOWN = object()


def enabled() -> bool:
    """True when a real (SDK) tracer provider is configured. Never imports anything.

    Asked on every attempt, enqueue and log line, so it reads the API's global directly (~0.1 µs):
    `trace.get_tracer_provider()` looks up an environment variable on every call while no provider
    is set (~1.4 µs, measured), the very case this must make cheap. An API without that global
    (a later version) gets the public call."""
    trace = _trace_module()
    if trace is None:
        return False
    provider = getattr(trace, "_TRACER_PROVIDER", _UNKNOWN)
    if provider is None:
        if not _ENV_PROVIDER:
            return False
        provider = trace.get_tracer_provider()  # loads the provider the variable names
    elif provider is _UNKNOWN:
        provider = trace.get_tracer_provider()
    return not isinstance(provider, trace.ProxyTracerProvider | trace.NoOpTracerProvider)


def tracer() -> Any:
    return _trace_module().get_tracer(TRACER_NAME)


def current_traceparent() -> str | None:
    """The W3C traceparent of the current span, to store with a job at enqueue; None when tracing is
    off or no span is current."""
    if not enabled():
        return None
    return traceparent_of(_trace_module().get_current_span())


def traceparent_of(span: Any) -> str | None:
    """`span`'s W3C traceparent (None for None or an invalid span)."""
    if span is None:
        return None
    context = span.get_span_context()
    if not context.is_valid:
        return None
    return f"00-{context.trace_id:032x}-{context.span_id:016x}-{int(context.trace_flags):02x}"


def _parent(traceparent: str | None) -> Any:
    """The context a stored traceparent names (None: a root span)."""
    if not traceparent:
        return None
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    return TraceContextTextMapPropagator().extract({"traceparent": traceparent})


def log_ids() -> dict[str, str]:
    """trace_id and span_id of the current span, for log lines (empty when there is none)."""
    if not enabled():
        return {}
    context = _trace_module().get_current_span().get_span_context()
    if not context.is_valid:
        return {}
    return {"trace_id": f"{context.trace_id:032x}", "span_id": f"{context.span_id:016x}"}


def job_trace_ids(traceparent: str | None) -> dict[str, str]:
    """The trace_id of a job's stored traceparent, for a line about the job logged outside any of
    its attempts (a claimed job put back): its trace, not a span of it. Empty when tracing is off."""
    if not traceparent or not enabled():
        return {}
    parts = traceparent.split("-")
    return {"trace_id": parts[1]} if len(parts) == 4 and len(parts[1]) == 32 else {}


@contextmanager
def attempt_span(*, queue: str, job_id: str, task: str, attempt: int, traceparent: str | None,
                 wait_sec: float, previous: str | None = None) -> Iterator[Any]:
    """The span of one attempt (CONSUMER, a child of the enqueue's context), current in the block,
    with a `wait` child covering the time the job waited to be claimed, and a link to `previous`:
    on a retry, the span of the attempt that ended in it (`previous_attempt`); on a first attempt,
    the span that caused the job without being its parent (`cause`: the process step that armed a
    timer). Yields None when off."""
    if not enabled():
        yield None
        return
    import time

    from opentelemetry.trace import Link, SpanKind, get_current_span

    links = []
    if previous:
        previous_context = get_current_span(_parent(previous)).get_span_context()
        if previous_context.is_valid:
            links.append(Link(previous_context, {"dataloader.link": "previous_attempt" if attempt > 1 else "cause"}))
    attributes = {ATTR_SYSTEM: SYSTEM, ATTR_OPERATION: "process", ATTR_DESTINATION: queue,
                  ATTR_MESSAGE_ID: job_id, ATTR_TASK: task, ATTR_ATTEMPT: attempt}
    now_ns = time.time_ns()
    claimed_at = now_ns - int(max(0.0, wait_sec) * 1e9)
    with tracer().start_as_current_span(f"process {queue}", context=_parent(traceparent), kind=SpanKind.CONSUMER,
                                        attributes=attributes, links=links, start_time=claimed_at) as span:
        tracer().start_span("wait", attributes={"dataloader.job.wait_sec": wait_sec},
                            start_time=claimed_at).end(end_time=now_ns)
        yield span


@contextmanager
def root_span(name: str, attributes: Mapping[str, Any] | None = None) -> Iterator[Any]:
    """A PRODUCER span that starts a trace of its own whatever is current (a schedule's tick: the
    jobs it enqueues are its children); nothing when off."""
    if not enabled():
        yield None
        return
    from opentelemetry.context import Context
    from opentelemetry.trace import SpanKind

    with tracer().start_as_current_span(name, context=Context(), kind=SpanKind.PRODUCER,
                                        attributes=attributes) as span:
        yield span


@contextmanager
def producer_span(name: str, attributes: Mapping[str, Any] | None = None) -> Iterator[Any]:
    """A PRODUCER span, a child of the current span when there is one and the root of a trace of its
    own otherwise (a workflow's start: every attempt of the run is its child); nothing when off."""
    if not enabled():
        yield None
        return
    from opentelemetry.trace import SpanKind

    with tracer().start_as_current_span(name, kind=SpanKind.PRODUCER, attributes=attributes) as span:
        yield span


@contextmanager
def child_span(name: str, attributes: Mapping[str, Any] | None = None) -> Iterator[Any]:
    """A child of the current span (an attempt's `run`/`finish`); nothing when off."""
    if not enabled():
        yield None
        return
    with tracer().start_as_current_span(name, attributes=attributes) as span:
        yield span


def end_attempt(span: Any, outcome: str) -> None:
    """Record an attempt's outcome (succeeded, retried, failed, canceled, ...) on its span; a failure
    (retried or not) marks it an error."""
    span.set_attribute(ATTR_OUTCOME, outcome)
    if outcome in ("failed", "retried"):
        mark_error(span, f"attempt {outcome}")


def mark_error(span: Any, description: str) -> None:
    from opentelemetry.trace import Status, StatusCode

    span.set_status(Status(StatusCode.ERROR, description))


def set_attribute(span: Any, key: str, value: Any) -> None:
    if span is not None:
        span.set_attribute(key, value)


def configure_from_env(environ: Mapping[str, str] | None = None, *, one_line: bool = False) -> bool:
    """Set an SDK tracer provider when OTEL_TRACES_EXPORTER names exporters (`console`, or any the
    installed packages register, such as `otlp`) and no provider is set yet; the resource comes from
    OTEL_SERVICE_NAME / OTEL_RESOURCE_ATTRIBUTES. Returns True when tracing is on afterwards. For the
    service commands (`serve`, `worker`); a program embedding `App` configures its own provider.
    `one_line`: the console exporter writes each span as one JSON line (the service's logs are JSON
    lines, and a collector reading its output must find nothing else there), not pretty-printed."""
    environ = os.environ if environ is None else environ
    names = [n.strip() for n in environ.get("OTEL_TRACES_EXPORTER", "").split(",") if n.strip()]
    if not names or names == ["none"] or environ.get("OTEL_SDK_DISABLED", "").lower() == "true":
        return enabled()
    if enabled():
        return True
    try:
        from opentelemetry import trace
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter, SimpleSpanProcessor
    except ImportError:
        return False
    from importlib.metadata import entry_points

    provider = TracerProvider(resource=Resource.create())
    for name in names:
        if name == "console":
            # one span per write, in order: a console is for reading, not for throughput
            exporter = (ConsoleSpanExporter(formatter=lambda span: span.to_json(indent=None) + os.linesep)
                        if one_line else ConsoleSpanExporter())
            provider.add_span_processor(SimpleSpanProcessor(exporter))
            continue
        found = entry_points(group="opentelemetry_traces_exporter", name=name)
        if not found:
            raise RuntimeError(f"OTEL_TRACES_EXPORTER names {name!r}, which no installed package provides")
        provider.add_span_processor(BatchSpanProcessor(next(iter(found)).load()()))
    trace.set_tracer_provider(provider)
    return True


def shutdown() -> None:
    """Flush and stop the configured provider's exporters (at the end of a service command)."""
    trace = _trace_module()
    if trace is not None and hasattr(provider := trace.get_tracer_provider(), "shutdown"):
        provider.shutdown()
