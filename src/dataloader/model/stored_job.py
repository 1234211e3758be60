"""A job on its way into `dl_jobs` (`NewJob`), what the enqueue found there (`Inserted`), and a
row read back as a `Job` on any connection.

These are pure values and functions: the repository runs the statements on the executor it is
given (storage/executor.py) and hands the rows here, so the decoding of what the database decided
is written once, whichever connection read it. A row read on dataloader's own connections is
decoded by its codecs; one read on a caller's connection may hold jsonb as text and uuids as
strings (`decoded=False`).
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from dataloader.exceptions import IdempotencyConflict, RestartConflict
from dataloader.model import payload_crypto
from dataloader.model.job import Job, JobStatus

# What an enqueue did (metrics.count_enqueue counts each): a new job; a restartable's queued job
# updated; the job of a unique_for window already there; the job of an idempotency key already there.
EnqueueOutcome = Literal["enqueued", "retriggered", "unique_hit", "replayed"]


@dataclass(frozen=True, slots=True)
class NewJob:
    queue: str
    task: str
    lock_key: str
    args_json: str  # the args, already encoded (the size check encodes them anyway)
    idempotency_key: str | None = None
    partition_key: str = ""
    priority: int = 100
    available_at: datetime | None = None
    max_attempts: int = 5
    lease_ttl_sec: int = 60
    producer: str | None = None
    job_id: uuid.UUID | None = None
    timeout_sec: int | None = None  # the job's run-time limit (None: the pipeline's, or none)
    chain_next_json: str | None = None  # stages planned after it (JSON text; None: none)
    restartable: bool = False  # a trigger of its lock_key updates the queued job or queues one more run


@dataclass(frozen=True, slots=True)
class Inserted:
    """What an enqueue found: the job, whether this call created it, and for an existing one
    whether its stored args equal the request's (jsonb equality)."""

    job: Job
    created: bool
    same_args: bool = True


def enqueued(job: NewJob, job_id: uuid.UUID, inserted: Any, found: Any, decoded: bool, *,
             sealed: bool = False) -> Inserted:
    """The outcome of an enqueue from the row its insert returned (`inserted`, None when the
    idempotency or restart key named a job already) or the row it found instead (`found`).
    `sealed`: the args were sent encrypted, so the database compared two ciphertexts: the found
    job's args (opened as read) are compared with the request's here instead."""
    if inserted is None:
        # get_job_by_idempotency_key.sql compares the args; a restartable's queued job is its own
        found_job = job_from_row(found, decoded)
        if sealed:
            return Inserted(found_job, False, found_job.args == json.loads(job.args_json))
        return Inserted(found_job, False, bool(found.get("same_args", True)))
    if job.restartable:  # insert_restartable_job.sql: a new job, or the queued one it updated
        return Inserted(job_from_row(inserted, decoded), bool(inserted["created"]))
    return Inserted(inserted_job(job, job_id, inserted), True)


def replay_outcome(job: NewJob, inserted: Inserted, given: frozenset[str]) -> EnqueueOutcome:
    """What an enqueue that found a job already there did, or the error that says why that job is
    not this request's. `given`: the request's optional fields the producer set (lock_key,
    max_attempts, lease_ttl_sec, timeout_sec, unique_for_sec): only those are compared."""
    found = inserted.job
    if job.restartable:
        # The queued job of the key is updated unless it has another task or queue (nothing changed)
        if (found.task, found.queue) != (job.task, job.queue):
            raise RestartConflict(
                f"lock_key {job.lock_key!r} names queued restartable job {found.id} of task {found.task!r} "
                f"on queue {found.queue!r}; a restartable trigger must name the same task and queue")
        return "retriggered"
    if "unique_for_sec" in given:
        return "unique_hit"
    # available_at is not compared: the engine moves it (retries, lock hand-offs), so a faithful
    # replay of the original request would look different after the job ran. args are compared by
    # the database (jsonb equality), as it stores them.
    compared = ("queue", "task", "lock_key", "partition_key", "priority") if "lock_key" in given else (
        "queue", "task", "partition_key", "priority")
    differs = [name for name in compared if getattr(job, name) != getattr(found, name)]
    if not inserted.same_args:
        differs.insert(2, "args")
    differs.extend(name for name in ("max_attempts", "lease_ttl_sec", "timeout_sec")
                   if name in given and getattr(job, name) != getattr(found, name))
    if differs:
        raise IdempotencyConflict(f"idempotency_key {job.idempotency_key!r} already names job {found.id} "
                                  f"with a different {', '.join(differs)}")
    return "replayed"


def inserted_job(job: NewJob, job_id: uuid.UUID, row: Any) -> Job:
    """The Job a row of insert_job.sql / insert_job_group.sql stands for: what the database decided
    (the stored args and plan as it decodes them, available_at, created_at) and the rest as sent or
    as the column defaults of a new row (status queued, attempt 0, empty progress). It saves
    decoding all of the row's columns per enqueue. Works on any connection (jsonb maybe as text).
    The statements answer NULL args for the empty object (the commonest: no decoding per call)."""
    args = row["args"]
    if args is not None and not decoded_args(args):  # an envelope read on a caller's connection
        args = json.loads(job.args_json)
    return Job(
        id=job_id, queue=job.queue, task=job.task, args={} if args is None else json_value(args), lock_key=job.lock_key,
        status=JobStatus.queued, attempt=0, max_attempts=job.max_attempts, priority=job.priority,
        available_at=row["available_at"], created_at=row["created_at"], idempotency_key=job.idempotency_key,
        partition_key=job.partition_key, lease_ttl_sec=job.lease_ttl_sec, progress={}, producer=job.producer,
        timeout_sec=job.timeout_sec, chain_id=job_id if job.chain_next_json is not None else None,
        chain_next=json_value(row["chain_next"]))


def job_from_row(row: Any, decoded: bool = True) -> Job:
    """A whole `dl_jobs` row as a Job; `decoded=False` for a row read on a caller's connection."""
    if decoded:
        return Job.from_row(row)
    row = dict(row)
    row["job_id"] = as_uuid(row["job_id"])
    row["args"] = payload_crypto.reveal(json_value(row.get("args")))
    row["progress"] = payload_crypto.reveal(json_value(row.get("progress")))
    row["chain_next"] = json_value(row.get("chain_next"))
    row["result"] = payload_crypto.reveal(_result_value(row.get("result")))
    return Job.from_row(row)


def decoded_args(value: Any) -> bool:
    """Whether stored args came back as their value: not an envelope left sealed (a caller's
    connection has no key ring in its codec; the request's own args are the value then)."""
    if isinstance(value, str):
        return payload_crypto.ENVELOPE_KEY not in value
    return not payload_crypto.is_envelope(value)


def json_value(value: Any) -> Any:
    """A jsonb column as a Python value, whether the connection decoded it or left it as text."""
    return json.loads(value) if isinstance(value, str) else value


def as_uuid(value: Any) -> uuid.UUID:
    """A uuid column as the caller's driver decoded it (some give text)."""
    return value if isinstance(value, uuid.UUID) else uuid.UUID(str(value))


def _result_value(value: Any) -> Any:
    """The result column read on a caller's connection. Unlike args and progress (objects), a result
    may be a JSON string, so a str is ambiguous: text the driver left undecoded, or a decoded JSON
    string. Text that parses is taken as undecoded; anything else is the decoded string itself."""
    if not isinstance(value, str):
        return value
    try:
        return json.loads(value)
    except ValueError:
        return value
