"""Tracing off (issue 23): without OpenTelemetry installed, or with it installed and no provider
configured, `dataloader.tracing` answers "off" without importing anything or making a span, and
`import dataloader` does not load OpenTelemetry. `configure_from_env` sets a provider only when
OTEL_TRACES_EXPORTER asks for one."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from opentelemetry import trace

from dataloader import tracing


def run(code: str) -> dict[str, object]:
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.process  # a fresh interpreter
def test_without_opentelemetry_installed_everything_is_off_and_nothing_breaks():
    # None in sys.modules makes every `import opentelemetry...` raise ImportError, as if not installed
    result = run("""
import sys, json
for name in [m for m in sys.modules if m.startswith("opentelemetry")]:
    del sys.modules[name]
sys.modules["opentelemetry"] = None
import dataloader, dataloader.app, dataloader.workers.attempt
from dataloader import tracing
with tracing.attempt_span(queue="q", job_id="j", task="t", attempt=1, traceparent=None, wait_sec=0.1) as span:
    inner = span
with tracing.child_span("run t") as child:
    pass
try:
    import opentelemetry.trace
    importable = True
except ImportError:
    importable = False
print(json.dumps({"enabled": tracing.enabled(), "traceparent": tracing.current_traceparent(),
                  "ids": tracing.log_ids(), "span": inner, "child": child, "importable": importable,
                  "configured": tracing.configure_from_env({"OTEL_TRACES_EXPORTER": "console"})}))
""")
    assert result == {"enabled": False, "traceparent": None, "ids": {}, "span": None, "child": None,
                      "importable": False, "configured": False}


@pytest.mark.process
def test_import_dataloader_does_not_load_opentelemetry():
    result = run("import sys, json, dataloader, dataloader.app\n"
                 "print(json.dumps({'loaded': sorted(m for m in sys.modules if m.startswith('opentelemetry'))}))")
    assert result == {"loaded": []}


def test_installed_but_no_provider_is_off_even_inside_an_api_span():
    assert isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider)
    assert not tracing.enabled()
    with trace.get_tracer("t").start_as_current_span("s"):
        assert tracing.current_traceparent() is None and tracing.log_ids() == {}
        with tracing.attempt_span(queue="q", job_id="j", task="t", attempt=1, traceparent=None, wait_sec=0) as span:
            assert span is None


def test_no_exporter_named_sets_no_provider():
    assert tracing.configure_from_env({}) is False
    assert tracing.configure_from_env({"OTEL_TRACES_EXPORTER": "none"}) is False
    assert isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider)


@pytest.mark.process
def test_configure_from_env_with_the_console_exporter_traces_an_attempt():
    result = run("""
import json, contextlib, io
from dataloader import tracing
out = io.StringIO()
with contextlib.redirect_stdout(out):
    on = tracing.configure_from_env({"OTEL_TRACES_EXPORTER": "console"})
    with tracing.attempt_span(queue="q", job_id="j-1", task="t", attempt=2,
                              traceparent="00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", wait_sec=0.5):
        ids = tracing.log_ids()
    tracing.shutdown()
print(json.dumps({"on": on, "ids": ids, "printed": out.getvalue()}))
""")
    assert result["on"] is True
    assert result["ids"]["trace_id"] == "4bf92f3577b34da6a3ce929d0e0e4736"
    printed = str(result["printed"])
    assert '"name": "process q"' in printed and '"name": "wait"' in printed
    assert '"messaging.message.id": "j-1"' in printed and '"kind": "SpanKind.CONSUMER"' in printed


@pytest.mark.process
def test_an_exporter_no_package_provides_is_a_clear_error():
    out = subprocess.run([sys.executable, "-c", "from dataloader import tracing\n"
                          "tracing.configure_from_env({'OTEL_TRACES_EXPORTER': 'nosuch'})"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode != 0 and "OTEL_TRACES_EXPORTER names 'nosuch'" in out.stderr
