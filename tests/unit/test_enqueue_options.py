"""The enqueue keyword arguments are defined once (`jobs/enqueue.EnqueueOptions`) and App.enqueue,
SyncApp.enqueue and the CLI build their JobRequest through the one `job_request`: every option
reaches the request, and a keyword no signature has is the TypeError Python would give."""

from __future__ import annotations

import asyncio
import inspect
from datetime import UTC, datetime, timedelta

import pytest

import dataloader
from dataloader.jobs.enqueue import ENQUEUE_OPTIONS, job_request
from dataloader.jobs.manager import JobRequest

APP = dataloader.App(dataloader.Settings(db_dsn="postgresql://unused@127.0.0.1/unused", workers=[]))
# The options that are not JobRequest fields of the same name, and what they become.
TRANSLATED = {"delay": "available_at", "unique_for": "unique_for_sec"}


def test_every_option_is_a_request_field_or_becomes_one():
    fields = set(JobRequest.model_fields)
    for name in ENQUEUE_OPTIONS:
        assert TRANSLATED.get(name, name) in fields, name
    assert fields - {TRANSLATED.get(n, n) for n in ENQUEUE_OPTIONS} == {"task", "args"}


def test_job_request_takes_every_option():
    request = job_request("t", {"a": 1}, queue="q", lock_key="k", partition_key="p", priority=5,
                          delay=timedelta(seconds=60), max_attempts=3, lease_ttl_sec=30, timeout_sec=9,
                          unique_for=3600, unique_key="u")
    assert (request.queue, request.lock_key, request.partition_key, request.priority) == ("q", "k", "p", 5)
    assert request.available_at is not None and request.available_at > datetime.now(UTC)
    assert (request.max_attempts, request.lease_ttl_sec, request.timeout_sec) == (3, 30, 9)
    assert (request.unique_for_sec, request.unique_key) == (3600, "u")


def test_app_and_sync_app_take_the_same_arguments():
    for cls in (dataloader.App, dataloader.SyncApp):
        params = inspect.signature(cls.enqueue).parameters
        assert list(params)[:3] == ["self", "task", "args"] and params["conn"].kind is inspect.Parameter.KEYWORD_ONLY
        assert params["options"].kind is inspect.Parameter.VAR_KEYWORD


def test_an_unknown_keyword_is_a_type_error_before_any_io():
    with pytest.raises(TypeError, match=r"enqueue\(\) got an unexpected keyword argument 'queu'"):
        asyncio.run(APP.enqueue("t", queu="q"))
