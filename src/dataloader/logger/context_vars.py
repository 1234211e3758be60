"""Context carried into every log line: the HTTP request id, the job being worked on, and the current
trace and span ids when tracing is on."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

from dataloader import tracing

request_id_var: ContextVar[str | None] = ContextVar("request_id", default=None)
job_var: ContextVar[dict[str, Any] | None] = ContextVar("job", default=None)


class ClientState:
    """Whether the client of the HTTP request being served went away before its answer (set by the
    API's middleware, which watches the connection). What is raised afterwards (a cancelled
    statement, a connection closed under it) is then the client's doing, not the server's: it is
    counted as 499 and logged at info, never as a 500/503 warning."""

    __slots__ = ("gone",)

    def __init__(self) -> None:
        self.gone = False


client_var: ContextVar[ClientState | None] = ContextVar("client", default=None)


def client_gone() -> bool:
    """True while serving a request whose client already left."""
    state = client_var.get()
    return state is not None and state.gone


@contextmanager
def bind_job(**fields: Any) -> Iterator[None]:
    """Attach job fields (job_id, queue, task, attempt, request_id) to every log line in this block."""
    token = job_var.set(fields)
    try:
        yield
    finally:
        job_var.reset(token)


# Which loggers get the request/job context. A context variable is copied into every task and
# callback scheduled while it is set, so a library's background work (asyncpg resetting a released
# connection, a pool warning from a timer, asyncio's own callbacks) logs from a context a request or
# job happened to leave behind: its lines would carry a request_id/job_id that is not theirs, which
# misleads more than a missing one. So only loggers whose code runs *for* the request or job get it:
# ours (`dataloader.*`), uvicorn's (it logs a request's errors from the request's own task) and the
# user's pipeline modules (registered as they are imported, see load_pipeline_modules), whose lines
# are written inside the job. Python's warnings (`py.warnings`, with captureWarnings) too: a warning
# is logged at its call, by the code that raised it. Everything else logs without request/job fields.
_context_loggers: set[str] = {"dataloader", "uvicorn", "py.warnings"}


def share_log_context_with(logger_prefix: str) -> None:
    """Let loggers named `logger_prefix` or `logger_prefix.*` carry the request/job context."""
    _context_loggers.add(logger_prefix)


def owns_context(logger_name: str) -> bool:
    """True when records of `logger_name` may carry the request/job context (see above)."""
    name = logger_name
    while True:
        if name in _context_loggers:
            return True
        if "." not in name:
            return False
        name = name.rsplit(".", 1)[0]


def current_context() -> dict[str, Any]:
    data: dict[str, Any] = {}
    request_id = request_id_var.get()
    if request_id:
        data["request_id"] = request_id
    job = job_var.get()
    if job:
        data.update(job)
    if tracing.enabled():  # the current span's ids: a job's lines carry its trace
        data.update(tracing.log_ids())
    return data
