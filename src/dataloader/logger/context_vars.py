"""Context carried into every log line: the HTTP request id and the job being worked on."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

request_id_var: ContextVar[str | None] = ContextVar("request_id", default=None)
job_var: ContextVar[dict[str, Any] | None] = ContextVar("job", default=None)


@contextmanager
def bind_job(**fields: Any) -> Iterator[None]:
    """Attach job fields (job_id, queue, task, attempt, request_id) to every log line in this block."""
    token = job_var.set(fields)
    try:
        yield
    finally:
        job_var.reset(token)


def current_context() -> dict[str, Any]:
    data: dict[str, Any] = {}
    request_id = request_id_var.get()
    if request_id:
        data["request_id"] = request_id
    job = job_var.get()
    if job:
        data.update(job)
    return data
