"""The batch enqueue's fast path (jobs/manager.py `plain_jobs` + `batch_columns`) and the
time-ordered job ids (dataloader/model/ids.py). No database: the statement is the same as before."""

from __future__ import annotations

import os
import uuid
from datetime import UTC, datetime, timedelta

import pytest

import dataloader
from dataloader.exceptions import ArgsTooLarge, InvalidJobRequest, UnknownTask, ValidationFailed
from dataloader.jobs.enqueue import batch_items, job_request
from dataloader.jobs.manager import JobManager, plain_jobs
from dataloader.model import ids
from dataloader.workers.pipelines.registry import PipelineRegistry

APP = dataloader.App(dataloader.Settings(db_dsn="postgresql://unused@127.0.0.1/unused", workers=[]))


def service(served: frozenset[str] = frozenset()) -> JobManager:
    return JobManager(None, PipelineRegistry(), default_lease_ttl_sec=77, max_args_bytes=200,  # type: ignore[arg-type]
                      served_queues=lambda: served)


PLAIN = [
    {"task": "t"},
    {"task": "t", "args": {"a": [1, "x"]}, "queue": "q", "lock_key": "k", "idempotency_key": "i",
     "partition_key": "p", "priority": 7, "available_at": datetime(2030, 1, 1, tzinfo=UTC),
     "max_attempts": 3, "lease_ttl_sec": 9, "timeout_sec": 11},
    {"task": "t", "lock_key": "", "args": {}, "priority": 0, "idempotency_key": None, "max_attempts": None},
]


def test_plain_items_get_the_columns_one_jobrequest_each_would():
    valid = plain_jobs(PLAIN)
    assert valid is not None
    fast = service().batch_columns(valid)
    slow_requests = [job_request(**item) for item in PLAIN]
    slow = service().batch_columns(slow_requests)
    job_ids, *rest = fast.columns
    assert job_ids == fast.ids and all(i.version == 7 for i in job_ids)
    locks = rest[4]
    # None: the job's own id, written by the statement (insert_jobs_rows.sql)
    assert locks == [None, "k", None] and slow.columns[5] == [None, "k", None]
    for name, f, s in zip(("queue", "task", "args", "idem", "lock", "partition", "priority", "at", "attempts",
                           "lease"), rest, slow.columns[1:], strict=True):
        assert f == s, name
    assert fast.timeouts == slow.timeouts == [None, 11, None]
    assert rest[6] == [100, 7, 0] and rest[8] == [5, 3, 5] and rest[9] == [77, 9, 77]
    assert fast.counts == {("default", "t"): 2, ("q", "t"): 1}


@pytest.mark.parametrize("item", [
    {"task": ""}, {"task": "  "}, {"task": "t\x00"}, {"task": 5}, {"queue": "q"},
    {"task": "t", "queue": " "}, {"task": "t", "lock_key": " "}, {"task": "t", "lock_key": "a\x00"},
    {"task": "t", "idempotency_key": ""}, {"task": "t", "idempotency_key": "a\x00"},
    {"task": "t", "partition_key": "a\x00"}, {"task": "t", "partition_key": None}, {"task": "t", "priority": -1},
    {"task": "t", "priority": None}, {"task": "t", "args": None}, {"task": "t", "args": [1]},
    {"task": "t", "available_at": datetime(2030, 1, 1)},
    {"task": "t", "available_at": datetime(1960, 1, 1, tzinfo=UTC)},
    {"task": "t", "delay": 1}, {"task": "t", "then": []}, {"task": "t", "unique_for": 60},
    {"task": "t", "restartable": False}, {"task": "t", "oops": 1}, {"task": "t", "max_attempts": 0},
    {"task": "t", "priority": "7"}, {"task": "t", "lease_ttl_sec": 9.0},
])
def test_anything_but_a_plain_valid_item_takes_the_jobrequest_path(item):
    assert plain_jobs([{"task": "ok"}, item]) is None
    assert plain_jobs([{"task": "ok"}, dataloader.JobRequest(task="t", queue="q", lock_key="k")]) is None


@pytest.mark.parametrize(("items", "error"), [
    ([{"task": "t"}, {"task": ""}], ValidationFailed),
    ([{"task": "t"}, {"task": "t", "oops": 1}], ValidationFailed),
    ([{"task": "t"}, {"task": "t", "priority": "7"}], ValidationFailed),  # numbers are strict in every face
    ([{"task": "t", "args": {"a": "x" * 300}}, {"task": "unknown", "queue": "served"}], ArgsTooLarge),
    ([{"task": "unknown", "queue": "served"}, {"task": "t", "args": {"a": "x" * 300}}], UnknownTask),
    ([{"task": "t", "args": {"a": "\x00"}}], InvalidJobRequest),
])
def test_errors_are_the_first_bad_jobs_as_before(items, error):
    with pytest.raises(error):
        service(frozenset({"served"})).batch_columns(batch_items(items))


def test_ids_are_v7_ascending_unique_and_now():
    before = datetime.now(UTC) - timedelta(seconds=1)
    made = [ids.new_id() for _ in range(500)] + ids.new_ids(2000) + [ids.new_id()]
    assert made == sorted(made) and len(set(made)) == len(made)
    assert all(i.version == 7 and i.variant == uuid.RFC_4122 and uuid.UUID(str(i)) == i for i in made)
    at = datetime.fromtimestamp((made[-1].int >> 80) / 1000, UTC)
    assert before < at < datetime.now(UTC) + timedelta(seconds=1)


def test_ids_stay_ascending_when_the_clock_steps_back(monkeypatch):
    first = ids.new_id()
    monkeypatch.setattr(ids.time, "time_ns", lambda: 1_000_000_000_000_000)  # 2001
    assert ids.new_id() > first and ids.new_ids(3)[0] > first


def test_ids_of_a_forked_child_differ_from_the_parents():
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: same clock state, its own random bits
        os.write(write, ids.new_ids(100)[0].bytes)
        os._exit(0)
    os.close(write)
    mine = ids.new_ids(100)
    child = uuid.UUID(bytes=os.read(read, 16))
    os.waitpid(pid, 0)
    assert child not in mine
