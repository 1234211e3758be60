"""Which log lines carry the request/job context: ours, uvicorn's and the user's pipeline modules'
do; a library logging from a background callback that merely inherited a request's context does not."""

from __future__ import annotations

import asyncio
import json
import logging

import pytest

from dataloader.logger.context_vars import bind_job, request_id_var
from dataloader.logger.logger import ConsoleFormatter, JsonFormatter
from dataloader.workers.pipelines.registry import load_pipeline_modules


def record(logger: str, message: str = "hello") -> logging.LogRecord:
    return logging.LogRecord(logger, logging.WARNING, __file__, 1, message, None, None)


def formatted(logger: str) -> dict[str, object]:
    return json.loads(JsonFormatter().format(record(logger)))


@pytest.fixture
def in_request():
    token = request_id_var.set("req-of-someone-else")
    try:
        with bind_job(job_id="j-1", queue="q", task="t", attempt=1):
            yield
    finally:
        request_id_var.reset(token)


@pytest.mark.parametrize("logger", ["dataloader", "dataloader.access", "dataloader.workers.attempt",
                                    "uvicorn.error"])
def test_our_loggers_and_uvicorns_carry_the_context(logger, in_request):
    line = formatted(logger)
    assert line["request_id"] == "req-of-someone-else"
    assert (line["job_id"], line["queue"], line["task"], line["attempt"]) == ("j-1", "q", "t", 1)


@pytest.mark.parametrize("logger", ["asyncpg.pool", "asyncpg", "asyncio", "sqlalchemy.pool.impl.AsyncAdaptedQueuePool",
                                    "root", "dataloaderish", "uvicornx"])
def test_third_party_loggers_do_not(logger, in_request):
    line = formatted(logger)
    assert not {"request_id", "job_id", "queue", "task", "attempt"} & line.keys(), line
    # The console format follows the same rule.
    assert "req-of-someone-else" not in ConsoleFormatter().format(record(logger))


def test_pipeline_modules_named_in_dl_pipeline_modules_carry_the_job_context(in_request):
    # Their lines are written inside the job: a user's `logging.getLogger(__name__)` needs job_id.
    load_pipeline_modules(["tests.support.pipelines"])
    line = formatted("tests.support.pipelines")
    assert line["job_id"] == "j-1" and line["request_id"] == "req-of-someone-else"
    assert "job_id" not in formatted("tests.support")  # only the module itself (and below)


async def test_a_library_callback_scheduled_during_a_request_logs_without_its_request_id():
    """What happened with asyncpg's pool warning: a callback scheduled while a request was being
    served runs later with a copy of that request's context."""
    stream_records: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, rec: logging.LogRecord) -> None:
            stream_records.append(rec)

    library = logging.getLogger("asyncpg.pool")
    handler = Keep()
    library.addHandler(handler)
    done = asyncio.Event()
    try:
        token = request_id_var.set("req-a")
        try:
            asyncio.get_running_loop().call_soon(
                lambda: (library.warning("connection was not released"), done.set()))
        finally:
            request_id_var.reset(token)
        await done.wait()
    finally:
        library.removeHandler(handler)
    [rec] = stream_records
    assert "request_id" not in json.loads(JsonFormatter().format(rec))
