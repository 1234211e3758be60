"""Pure decisions behind the hardening fixes, tested without a database: which errors mean "the
database is away", how a retry delay is made safe to store, which times a job may be enqueued for,
how any stored timestamptz decodes, and when a stop decides an attempt's outcome."""

from __future__ import annotations

import asyncio
import datetime as dt
import logging

import asyncpg
import pytest
from pydantic import ValidationError

from dataloader.jobs.manager import AVAILABLE_AT_RANGE, JobRequest
from dataloader.storage.db import decode_timestamptz, encode_timestamptz, is_connection_error
from dataloader.workers.attempt import MAX_RETRY_DELAY_SEC, retry_delay
from dataloader.workers.pipelines.context import JobContext
from dataloader.workers.pipelines.registry import Pipeline, default_backoff

UTC = dt.UTC


@pytest.mark.parametrize("exc", [
    asyncpg.exceptions.InternalClientError("cannot switch to state 12; another operation (2) is in progress"),
    asyncpg.exceptions.InterfaceError("cannot call Connection.fetchval(): connection has been released back to "
                                      "the pool"),
    asyncpg.exceptions.ConnectionDoesNotExistError("connection was closed in the middle of operation"),
    asyncpg.exceptions.CannotConnectNowError("the database system is starting up"),
    asyncpg.exceptions.AdminShutdownError("terminating connection due to administrator command"),
    ConnectionRefusedError(111, "Connect call failed"),
    ConnectionResetError(104, "Connection reset by peer"),
    TimeoutError(),
])
def test_what_a_restart_raises_is_a_connection_error(exc):
    assert is_connection_error(exc)


@pytest.mark.parametrize("exc", [
    # asyncpg's client-side DataError subclasses InterfaceError: a value the driver cannot encode
    # is the caller's input, not an outage (it used to be answered 503 and retried forever).
    asyncpg.exceptions._base.DataError("invalid input for query argument $1: 99999999999 (value out of int32 range)"),
    asyncpg.exceptions.DataError("invalid input syntax"),
    asyncpg.exceptions.UniqueViolationError("duplicate key"),
    asyncpg.exceptions.UndefinedTableError("relation does not exist"),
    ValueError("x"),
])
def test_bad_statements_and_values_are_not_connection_errors(exc):
    assert not is_connection_error(exc)


def _pipeline(backoff) -> Pipeline:
    return Pipeline("p", lambda ctx: None, "sync", None, backoff)


def _raises(attempt: int) -> float:
    raise ZeroDivisionError("oops")


@pytest.mark.parametrize(("backoff", "expected"), [
    (lambda a: 5 * a, 15.0),
    (lambda a: -3, 0.0),
    (lambda a: 1e300, MAX_RETRY_DELAY_SEC),
    (lambda a: float("inf"), MAX_RETRY_DELAY_SEC),
    (lambda a: float("nan"), default_backoff(3)),
    (_raises, default_backoff(3)),
    (lambda a: "10", 10.0),
])
def test_retry_delay_is_always_a_storable_number(backoff, expected):
    assert retry_delay(_pipeline(backoff), 3, logging.getLogger("test")) == expected


def _request(available_at: dt.datetime) -> JobRequest:
    return JobRequest(queue="q", task="dl.noop", lock_key="k", available_at=available_at)


@pytest.mark.parametrize("when", [
    dt.datetime(1, 1, 1, tzinfo=UTC),
    dt.datetime(1969, 12, 31, 23, 59, 59, tzinfo=UTC),
    dt.datetime.max.replace(tzinfo=UTC),  # asyncpg used to store this as 'infinity'
    dt.datetime(9999, 12, 31, 23, 0, tzinfo=dt.timezone(dt.timedelta(hours=-5))),  # past datetime.max in UTC
])
def test_available_at_outside_the_range_is_refused_with_the_range_named(when):
    with pytest.raises(ValidationError, match="must be between 1970-01-01T00:00:00Z and 9999-01-01T00:00:00Z"):
        _request(when)


@pytest.mark.parametrize("when", [AVAILABLE_AT_RANGE[0], dt.datetime(2030, 1, 1, tzinfo=UTC),
                                  AVAILABLE_AT_RANGE[1] - dt.timedelta(microseconds=1)])
def test_available_at_inside_the_range_is_accepted(when):
    assert _request(when).available_at == when


def test_every_stored_timestamptz_decodes():
    max_time, min_time = dt.datetime.max.replace(tzinfo=UTC), dt.datetime.min.replace(tzinfo=UTC)
    assert decode_timestamptz((2**63 - 1,)) == max_time  # 'infinity'
    assert decode_timestamptz((-(2**63),)) == min_time  # '-infinity'
    assert decode_timestamptz((6 * 10**17,)) == max_time  # about year 21000
    when = dt.datetime(2026, 11, 22, 7, 30, 1, 123456, tzinfo=UTC)
    assert decode_timestamptz(encode_timestamptz(when)) == when
    # datetime.max is no longer turned into 'infinity' on the way in
    assert encode_timestamptz(max_time)[0] < 2**63 - 1


def _context() -> JobContext:
    async def report(_: dict) -> None:
        return None

    return JobContext(job_id=None, queue="q", task="t", args={}, attempt=1, max_attempts=1,  # type: ignore[arg-type]
                      lock_key="k", partition_key="", report_progress=report, log=logging.getLogger("t"),
                      loop=asyncio.new_event_loop())


def test_a_stop_counts_as_seen_only_once_the_pipeline_looked_after_it_was_set():
    ctx = _context()
    assert ctx.stop_requested is False and not ctx.stop_seen  # looking before a stop is not seeing it
    ctx.stop_reason = "cancel"
    assert not ctx.stop_seen  # set, but the pipeline has not looked yet
    assert ctx.stop_requested is True
    assert ctx.stop_seen
    other = _context()
    other.stop_reason = "shutdown"
    with pytest.raises(Exception, match="shutdown"):
        other.raise_if_stopped()
    assert other.stop_seen
