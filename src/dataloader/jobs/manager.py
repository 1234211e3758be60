"""Jobs: enqueue (idempotent, optionally in the caller's transaction), read, list, cancel, retry.
The business rules behind the Python API (`dataloader.App`), the HTTP API and the CLI alike."""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import logging
import uuid
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Annotated, Any, Required

from pydantic import (
    AwareDatetime,
    ConfigDict,
    Field,
    TypeAdapter,
    ValidationError,
    field_validator,
    model_validator,
    with_config,
)
from typing_extensions import TypedDict  # pydantic needs this one on Python < 3.12

from dataloader import metrics, tracing
from dataloader.base import StrictModel
from dataloader.exceptions import (
    ChainNotFound,
    InvalidCursor,
    InvalidJobRequest,
    JobAlreadyFinished,
    JobNotFinished,
    JobNotFound,
    JobNotQueued,
    JobNotRetryable,
    UnknownTask,
    ValidationFailed,
)
from dataloader.model.audit import Outcome
from dataloader.model.chain import MAX_STAGES, Stage, stages_json
from dataloader.model.clock import iso
from dataloader.model.ids import new_id, new_ids
from dataloader.model.job import (
    FINISHED_STATUSES,
    RETRYABLE_STATUSES,
    Chain,
    Job,
    JobEvent,
    JobListing,
    JobPage,
    JobStatus,
)
from dataloader.model.queue_depth import QueueDepth
from dataloader.model.storable import args_problem
from dataloader.model.stored_job import EnqueueOutcome, Inserted, NewJob, replay_outcome
from dataloader.storage.audit_repository import audited
from dataloader.storage.audit_repository import counted as audit_counted
from dataloader.storage.audit_repository import record as audit_record
from dataloader.storage.executor import Executor
from dataloader.storage.repositories import JobRepository
from dataloader.workers.pipelines.registry import PipelineRegistry

log = logging.getLogger("dataloader.jobs")

MAX_LIST_LIMIT = 500
# The optional fields of a request that a replay of its idempotency key is compared on, when set.
_REPLAY_COMPARED = ("lock_key", "max_attempts", "lease_ttl_sec", "timeout_sec", "unique_for_sec")
MAX_CHAIN_JOBS = 10_000
PG_INT_MAX = 2**31 - 1
# Times a job may be enqueued for. Anything earlier means "now" anyway; anything later is almost
# surely a mistake (milliseconds given as seconds). The bounds keep every stored value ordinary:
# datetime.max used to be stored as 'infinity' and broke every reader that subtracted it.
AVAILABLE_AT_RANGE = (datetime(1970, 1, 1, tzinfo=UTC), datetime(9999, 1, 1, tzinfo=UTC))


class JobRequest(StrictModel):
    """A request to run `task` on `queue` (003 §5, plus max_attempts and lease_ttl_sec)."""

    queue: str = Field(min_length=1, max_length=200, description="Queue the job goes to")
    task: str = Field(min_length=1, max_length=200, description="Registered pipeline name")
    args: dict[str, Any] = Field(default_factory=dict,
                                 description="Arguments for the pipeline (a JSON object)")
    idempotency_key: str | None = Field(default=None, min_length=1, max_length=512)
    lock_key: str | None = Field(default=None, min_length=1, max_length=512,
                                 description="Jobs with one lock_key never overlap (default: the job's own id)")
    partition_key: str = Field(default="", max_length=512)
    # Numbers are strict (no "5" for 5) in every face: `set_priority` and the CLI never took text
    # for a number, so neither does a trigger (docs/errors.md).
    priority: int = Field(default=100, ge=0, le=PG_INT_MAX, strict=True, description="Lower runs first")
    available_at: AwareDatetime | None = Field(default=None, description="RFC 3339 with a timezone")
    max_attempts: int | None = Field(default=None, ge=1, le=1000, strict=True)
    lease_ttl_sec: int | None = Field(default=None, ge=1, le=7 * 24 * 3600, strict=True)
    timeout_sec: int | None = Field(
        default=None, ge=1, le=7 * 24 * 3600, strict=True,
        description="Run-time limit of each attempt in seconds (default: the pipeline's, or none); past it "
                    "the attempt is stopped and the job retries or fails per its policy")
    then: list[Stage] = Field(
        default_factory=list, max_length=MAX_STAGES,
        description="Stages to run after this job succeeds, in order (a chain); each receives the previous "
                    "stage's result as args.input")
    restartable: bool = Field(
        default=False, strict=True,
        description="Its lock_key is a restart key: while a job of that key is queued, a trigger updates its "
                    "args and time; while one runs, a trigger queues exactly one more run after it")
    unique_for_sec: int | None = Field(
        default=None, ge=1, le=366 * 24 * 3600, strict=True,
        description="At most one job with this task, queue and unique_key (default: the args) per window of "
                    "this many seconds; a repeat in the window returns the existing job")
    unique_key: str | None = Field(default=None, min_length=1, max_length=512,
                                   description="What makes two jobs the same for unique_for_sec (default: args)")

    @field_validator("queue", "task", "lock_key")
    @classmethod
    def _not_blank(cls, value: str | None) -> str | None:
        if value is None:
            return value
        if not value.strip():
            raise ValueError("must not be blank")
        if "\x00" in value:
            raise ValueError("must not contain NUL characters")
        return value

    @field_validator("available_at")
    @classmethod
    def _storable_time(cls, value: datetime | None) -> datetime | None:
        if value is None:
            return value
        low, high = AVAILABLE_AT_RANGE
        try:
            in_range = low <= value.astimezone(UTC) < high
        except OverflowError:  # e.g. 9999-12-31T23:00:00-05:00 is past datetime.max in UTC
            in_range = False
        if not in_range:
            raise ValueError(f"must be between {low:%Y-%m-%dT%H:%M:%SZ} and {high:%Y-%m-%dT%H:%M:%SZ}")
        return value

    @model_validator(mode="after")
    def _one_meaning_per_key(self) -> JobRequest:
        if self.restartable and self.lock_key is None:
            raise ValueError("a restartable job needs a lock_key: it is the key that re-triggers it")
        if self.restartable and self.idempotency_key is not None:
            raise ValueError("restartable and idempotency_key exclude each other: an idempotency_key returns the "
                             "same job forever, a restartable trigger updates or re-runs it")
        if self.unique_for_sec is not None and (self.idempotency_key is not None or self.restartable):
            raise ValueError("unique_for_sec cannot be combined with idempotency_key or restartable")
        if self.unique_key is not None and self.unique_for_sec is None:
            raise ValueError("unique_key needs unique_for_sec")
        return self

    @field_validator("idempotency_key", "partition_key", "unique_key")
    @classmethod
    def _no_nul(cls, value: str | None) -> str | None:
        if value is not None and "\x00" in value:
            raise ValueError("must not contain NUL characters")
        return value


@with_config(ConfigDict(extra="forbid"))
class _PlainJob(TypedDict, total=False):
    """What `plain_jobs` validates: `JobRequest`'s fields that a plain batch item may carry, with
    their constraints; `lock_key` may be missing, None or "" (then it is the job's own id)."""

    task: Required[Annotated[str, Field(min_length=1, max_length=200)]]
    args: dict[str, Any]
    queue: Annotated[str, Field(min_length=1, max_length=200)]
    lock_key: Annotated[str, Field(max_length=512)] | None
    idempotency_key: Annotated[str, Field(min_length=1, max_length=512)] | None
    partition_key: Annotated[str, Field(max_length=512)]
    priority: Annotated[int, Field(ge=0, le=PG_INT_MAX, strict=True)]
    available_at: AwareDatetime | None
    max_attempts: Annotated[int, Field(ge=1, le=1000, strict=True)] | None
    lease_ttl_sec: Annotated[int, Field(ge=1, le=7 * 24 * 3600, strict=True)] | None
    timeout_sec: Annotated[int, Field(ge=1, le=7 * 24 * 3600, strict=True)] | None


_PLAIN_JOBS = TypeAdapter(list[_PlainJob])


def plain_jobs(items: Sequence[Any]) -> list[dict[str, Any]] | None:
    """The batch validated in one call, when every item is a plain dict that `JobRequest` (through
    `jobs/enqueue.job_request`) accepts as it is: only the fields of `_PlainJob`, each valid there, and no
    blank, NUL or out-of-range value that JobRequest's own validators refuse. None otherwise (a
    `JobRequest`, `delay`, `then`, `unique_for`, any error ...): the caller then builds one
    JobRequest per item as before, which accepts the same items and raises the same errors.

    It saves ~4 of the ~5.5 ms per 1,000 jobs that 1,000 JobRequests cost (bench/README.md)."""
    if not all(type(item) is dict for item in items):
        return None
    try:
        valid = _PLAIN_JOBS.validate_python(items)
    except ValidationError:
        return None
    low, high = AVAILABLE_AT_RANGE
    for item in valid:
        for name in ("task", "queue", "lock_key"):
            value = item.get(name)
            if value and (not value.strip() or "\x00" in value):
                return None
        for name in ("idempotency_key", "partition_key"):
            value = item.get(name)
            if value and "\x00" in value:
                return None
        at = item.get("available_at")
        if at is not None:
            try:
                if not low <= at.astimezone(UTC) < high:
                    return None
            except OverflowError:
                return None
    return valid


@dataclass(frozen=True, slots=True)
class BatchColumns:
    """A batch as insert_jobs_batch.sql's arrays (`columns`: $1..$11, `timeouts`: $13), with the
    jobs per (queue, task) for the enqueued-jobs metric."""

    ids: list[uuid.UUID]
    columns: tuple[list[Any], ...]
    timeouts: list[int | None]
    counts: dict[tuple[str, str], int]

    def count_enqueued(self, inserted: list[uuid.UUID]) -> None:
        if len(inserted) == len(self.ids):
            counts = self.counts
        else:
            kept = set(inserted)
            queues, tasks = self.columns[1], self.columns[2]
            counts = Counter((queues[i], tasks[i]) for i, job_id in enumerate(self.ids) if job_id in kept)
        for (queue, task), count in counts.items():
            metrics.jobs_enqueued(queue, task).inc(count)


@dataclass(frozen=True)
class TriggerResult:
    job: Job
    created: bool


class JobManager:
    """`served_queues()` names the queues this process answers for: those whose workers run in it
    right now (the CLI, a tool of the service, answers for its WORKERS_JSON). The one rule for an
    unknown task (docs/errors.md `unknown_task`), in every face and for everything that names a
    task (a trigger, a batch, each stage of a chain, a schedule): a task with no pipeline here is
    refused for those queues (this process would fail it) and accepted for any other queue (a
    worker elsewhere with that pipeline will run it)."""

    def __init__(self, repo: JobRepository, registry: PipelineRegistry, *, default_lease_ttl_sec: int,
                 max_args_bytes: int, served_queues: Callable[[], frozenset[str]] = frozenset,
                 audit_enqueue: bool = False) -> None:
        self.repo = repo
        self.audit_enqueue = audit_enqueue  # DL_AUDIT_ENQUEUE: enqueues write audit rows too
        self.registry = registry
        self.default_lease_ttl_sec = default_lease_ttl_sec
        self.max_args_bytes = max_args_bytes
        self.served_queues = served_queues

    def check_task(self, task: str, queue: str, served: frozenset[str] | None = None) -> None:
        """UnknownTask for a task without a pipeline here on a queue this process serves."""
        if self.registry.get(task) is None and queue in (self.served_queues() if served is None else served):
            raise UnknownTask(
                f"unknown task {task!r}: this process serves queue {queue!r} and has no pipeline "
                f"for it (registered: {', '.join(self.registry.names())})")

    def _check_stages(self, stages: Sequence[Stage], queue: str, served: frozenset[str]) -> None:
        """The rule for each stage of a chain, on the queue it will run on (its own, else its parent's)."""
        for stage in stages:
            stage_queue = stage.queue or queue
            self.check_task(stage.task, stage_queue, served)
            self._check_stages(stage.then, stage_queue, served)

    def _pipeline_max(self, task: str, queue: str, served: frozenset[str]) -> int | None:
        """The task's pipeline's max_attempts (None: none here, or none of its own); UnknownTask for
        a task without a pipeline on a queue this process serves."""
        self.check_task(task, queue, served)
        pipeline = self.registry.get(task)
        # A pipeline's own max_attempts overrides the job's when the attempt ends; store the value
        # that will decide, so status and listings show it (a producer without the pipeline
        # stores the job's, and the worker's finish corrects it).
        return pipeline.max_attempts if pipeline is not None else None

    def _encode_args(self, args: dict[str, Any]) -> str:
        if not args:  # the most common args, and a third of a plain batch item's building time
            return "{}"
        encoded = json.dumps(args)
        problem = args_problem(args, encoded, self.max_args_bytes)
        if problem:  # what HTTP's model answers for the same args: one error in every face
            raise ValidationFailed(problem, [{"loc": ["args"], "msg": problem, "type": "value_error"}])
        return encoded

    def to_new_job(self, req: JobRequest, producer: str | None = None, job_id: uuid.UUID | None = None) -> NewJob:
        served = self.served_queues()
        pipeline_max = self._pipeline_max(req.task, req.queue, served)
        self._check_stages(req.then, req.queue, served)
        encoded = self._encode_args(req.args)
        idempotency_key = req.idempotency_key
        if req.lock_key is None:  # the documented default in every face: the job's own id
            job_id = job_id or new_id()
        if req.unique_for_sec is not None:
            idempotency_key = unique_window_key(req, datetime.now(UTC))
        try:
            chain_next_json = stages_json(req.then, self.max_args_bytes)
        except ValueError as exc:
            raise InvalidJobRequest(str(exc)) from None
        return NewJob(
            queue=req.queue, task=req.task, lock_key=req.lock_key or str(job_id), args_json=encoded,
            idempotency_key=idempotency_key, partition_key=req.partition_key, priority=req.priority,
            available_at=req.available_at, max_attempts=pipeline_max or req.max_attempts or 5,
            lease_ttl_sec=req.lease_ttl_sec or self.default_lease_ttl_sec, producer=producer, job_id=job_id,
            timeout_sec=req.timeout_sec, chain_next_json=chain_next_json, restartable=req.restartable,
        )

    def batch_columns(self, items: Sequence[JobRequest | Mapping[str, Any]]) -> BatchColumns:
        """The batch's arrays, checked job by job in input order as `to_new_job` checks one (the
        same errors, the first bad job's): `items` are JobRequests or `plain_jobs`' dicts. Every
        job gets a time-ordered id here (dataloader.model.ids); a plain item without a lock_key gets
        that id as its lock_key, as `enqueue` does (its lock_key here is None: the statement writes the
        id, insert_jobs_rows.sql)."""
        for item in items:
            if isinstance(item, JobRequest) and (item.restartable or item.then):
                raise InvalidJobRequest("restartable jobs and chains (then=) are enqueued one at a time: "
                                        "use enqueue / POST /api/v1/jobs/trigger")
        n = len(items)
        ids = new_ids(n)
        queues: list[str] = [""] * n
        tasks: list[str] = [""] * n
        args_col: list[str] = [""] * n
        idempotency: list[str | None] = [None] * n
        locks: list[str | None] = [None] * n
        partitions: list[str] = [""] * n
        priorities: list[int] = [100] * n
        available: list[datetime | None] = [None] * n
        attempts: list[int] = [5] * n
        leases: list[int] = [self.default_lease_ttl_sec] * n
        timeouts: list[int | None] = [None] * n
        served = self.served_queues()
        pipelines: dict[tuple[str, str], int | None] = {}
        counts: dict[tuple[str, str], int] = {}
        encode_args = self._encode_args
        default_lease = self.default_lease_ttl_sec
        for i, item in enumerate(items):
            fields: Mapping[str, Any] = item.__dict__ if isinstance(item, JobRequest) else item
            task, queue = fields["task"], fields.get("queue", "default")
            key = (queue, task)
            if key in pipelines:
                pipeline_max = pipelines[key]
                counts[key] += 1
            else:
                pipeline_max = pipelines[key] = self._pipeline_max(task, queue, served)
                counts[key] = 1
            args = fields.get("args") or {}
            args_col[i] = encode_args(args)
            queues[i], tasks[i] = queue, task
            # None: the job's own id, which insert_jobs_rows.sql writes (no str(uuid) per job here)
            locks[i] = fields.get("lock_key") or None
            if (unique_for := fields.get("unique_for_sec")) is not None:
                idempotency[i] = _unique_window_key(queue, task, fields.get("unique_key"), args, unique_for,
                                                    datetime.now(UTC))
            else:
                idempotency[i] = fields.get("idempotency_key")
            if (partition := fields.get("partition_key")) is not None:
                partitions[i] = partition
            if (priority := fields.get("priority")) is not None:
                priorities[i] = priority
            available[i] = fields.get("available_at")
            attempts[i] = pipeline_max or fields.get("max_attempts") or 5
            leases[i] = fields.get("lease_ttl_sec") or default_lease
            timeouts[i] = fields.get("timeout_sec")
        return BatchColumns(ids, (ids, queues, tasks, args_col, idempotency, locks, partitions, priorities,
                                  available, attempts, leases), timeouts, counts)

    async def trigger(self, req: JobRequest, *, producer: str | None = None, request_id: str | None = None,
                      job_id: uuid.UUID | None = None, on: Executor | None = None,
                      lock_key_given: bool = True) -> TriggerResult:
        """Enqueue one job. With `on` (the caller's transaction), the job commits or rolls back
        with the caller's transaction. `lock_key_given=False`: the request's lock_key is a default
        made for this call (the job's own id), so a replay is not compared on it."""
        new_job = self.to_new_job(req, producer, job_id)
        if self.audit_enqueue:
            inserted = await self._insert_audited(new_job, on, request_id)
        else:
            inserted = await self.repo.insert_job(new_job, on or self.repo.on, request_id,
                                                  traceparent=tracing.current_traceparent())
        if inserted.created:  # the common case: nothing to compare
            outcome: EnqueueOutcome = "enqueued"
        else:  # a replay is compared on the optional fields its producer set (only then worked out)
            given = {name for name in _REPLAY_COMPARED if getattr(req, name) is not None}
            if not (lock_key_given and req.lock_key is not None):
                given.discard("lock_key")
            outcome = replay_outcome(new_job, inserted, frozenset(given))
        metrics.count_enqueue(outcome, req.queue, req.task)
        return TriggerResult(inserted.job, inserted.created)

    async def _insert_audited(self, new_job: NewJob, on: Executor | None, request_id: str | None) -> Inserted:
        """An enqueue with its audit row (DL_AUDIT_ENQUEUE): in the caller's transaction when it gives
        one, else in a transaction of its own (not the group commit: the row must commit with it)."""
        details = {"queue": new_job.queue, "task": new_job.task}
        if on is not None:
            inserted = await self.repo.insert_job(new_job, on, request_id, traceparent=tracing.current_traceparent())
            await audit_record(on, "job.enqueue", "job", str(inserted.job.id), {**details, "created": inserted.created})
            audit_counted("job.enqueue", Outcome.OK)
            return inserted
        async with audited(self.repo, "job.enqueue", "job", None, details) as change:
            inserted = await change.repo.insert_job(new_job, change.tx, request_id,
                                                    traceparent=tracing.current_traceparent())
            change.target_id, change.details["created"] = str(inserted.job.id), inserted.created
        return inserted

    async def trigger_many(self, reqs: Sequence[JobRequest | Mapping[str, Any]], *, producer: str | None = None,
                           on: Executor | None = None, request_id: str | None = None) -> list[uuid.UUID]:
        """Enqueue many jobs in one statement (no per-job idempotency check of the body); returns
        the ids of the jobs inserted, in input order (a known idempotency_key is skipped). `reqs`:
        JobRequests or `plain_jobs`' dicts."""
        if not reqs:
            return []
        return await self.insert_batch(self.batch_columns(reqs), producer, on=on, request_id=request_id)

    async def insert_batch(self, batch: BatchColumns, producer: str | None, *, on: Executor | None = None,
                           request_id: str | None = None) -> list[uuid.UUID]:
        """Insert a checked batch (`batch_columns`) in one statement; the ids inserted."""
        if self.audit_enqueue:
            details = {"jobs": len(batch.ids), "queues": sorted({q for q, _ in batch.counts}),
                       "tasks": sorted({t for _, t in batch.counts})}
            if on is not None:
                ids = await self.repo.insert_job_columns(batch.columns, on, producer, batch.timeouts,
                                                         request_id=request_id,
                                                         traceparent=tracing.current_traceparent())
                await audit_record(on, "job.enqueue_many", "jobs", None, {**details, "inserted": len(ids)})
                audit_counted("job.enqueue_many", Outcome.OK)
            else:
                async with audited(self.repo, "job.enqueue_many", "jobs", None, details) as change:
                    ids = await change.repo.insert_job_columns(batch.columns, change.tx, producer, batch.timeouts,
                                                               request_id=request_id,
                                                               traceparent=tracing.current_traceparent())
                    change.details["inserted"] = len(ids)
            batch.count_enqueued(ids)
            return ids
        ids = await self.repo.insert_job_columns(batch.columns, on or self.repo.on, producer, batch.timeouts,
                                                 request_id=request_id, traceparent=tracing.current_traceparent())
        batch.count_enqueued(ids)
        return ids

    async def chain(self, chain_or_job_id: uuid.UUID, *, limit: int = MAX_CHAIN_JOBS) -> Chain:
        """A chain's jobs oldest first, by the chain's id or any of its jobs' ids."""
        if not 1 <= limit <= MAX_CHAIN_JOBS:
            raise InvalidJobRequest(f"limit must be between 1 and {MAX_CHAIN_JOBS}")
        jobs, joins = await self.repo.get_chain(chain_or_job_id, limit)
        if not jobs:
            raise ChainNotFound(f"no chain {chain_or_job_id} (and no job of a chain with that id)")
        chain_id = jobs[0].chain_id
        assert chain_id is not None
        return Chain(chain_id, [job.shown() for job in jobs], joins)

    async def get(self, job_id: uuid.UUID) -> Job:
        job = await self.repo.get_job(job_id)
        if job is None:
            raise JobNotFound(f"no job {job_id}")
        return job.shown()  # payloads masked for a principal without READ_PAYLOAD

    async def cancel(self, job_id: uuid.UUID, *, request_id: str | None = None) -> Job:
        async with audited(self.repo, "job.cancel", "job", job_id) as change:
            previous = await change.repo.cancel_job(job_id, request_id)
            if previous is None:
                raise JobNotFound(f"no job {job_id}")
            if previous in FINISHED_STATUSES:
                raise JobAlreadyFinished(f"job {job_id} already ended as {previous}; nothing to cancel")
            change.details["previous_status"] = previous
        return await self.get(job_id)

    async def retry(self, job_id: uuid.UUID, *, request_id: str | None = None) -> Job:
        """A failed, canceled or lost job back to `queued`, with a fresh attempt budget (journaled
        as a `requeue` with reason `manual_retry`)."""
        async with audited(self.repo, "job.retry", "job", job_id) as change:
            previous, retried = await change.repo.retry_job(job_id, request_id)
            if previous is None:
                raise JobNotFound(f"no job {job_id}")
            if not retried:
                raise JobNotRetryable(
                    f"job {job_id} is {previous}; only {', '.join(sorted(RETRYABLE_STATUSES))} jobs can be retried")
            change.details["previous_status"] = previous
        return await self.get(job_id)

    async def set_priority(self, job_id: uuid.UUID, priority: Any, *, request_id: str | None = None) -> Job:
        """A queued job's priority (lower runs first), journaled as `priority_changed` with the old
        and new value; the same priority again changes nothing. A running or finished job:
        JobNotQueued (its priority is read only by the claim)."""
        priority = check_priority(priority)
        async with audited(self.repo, "job.set_priority", "job", job_id, {"priority": priority}) as change:
            previous, before, changed = await change.repo.set_job_priority(job_id, priority, request_id)
            if previous is None:
                raise JobNotFound(f"no job {job_id}")
            if previous != JobStatus.queued.value:
                raise JobNotQueued(f"job {job_id} is {previous}; only a queued job's priority can change")
            change.details["previous_priority"] = before
        job = await self.get(job_id)
        if changed:
            metrics.JOBS_CHANGED_BY_OPERATOR.labels(job.queue, "set_priority").inc()
            log.info("job priority changed", extra={"job_id": str(job_id), "queue": job.queue, "from": before,
                                                    "to": priority, "request_id": request_id})
        return job

    async def delete(self, job_id: uuid.UUID, *, request_id: str | None = None) -> None:
        """Delete a finished job with its journal (the bulk delete's rule, one job). A queued or
        running job: JobNotFinished (cancel it first). The journal goes with the job; the audit trail's
        `job.delete` row stays (and the log line `job deleted`, dl_jobs_changed_by_operator_total)."""
        async with audited(self.repo, "job.delete", "job", job_id) as change:
            previous, queue, deleted = await change.repo.delete_job(job_id)
            if previous is None:
                raise JobNotFound(f"no job {job_id}")
            if not deleted:
                raise JobNotFinished(f"job {job_id} is {previous}; only a finished job can be deleted "
                                     "(cancel it first)")
            change.details.update(previous_status=previous, queue=queue)
        metrics.JOBS_CHANGED_BY_OPERATOR.labels(queue, "delete").inc()
        log.info("job deleted", extra={"job_id": str(job_id), "queue": queue, "status": previous,
                                       "request_id": request_id})

    async def queue_depths(self) -> list[QueueDepth]:
        """Every queue with live or held jobs: due, delayed, running and held counts, oldest due age."""
        return await self.repo.queue_depths()

    async def events(self, job_id: uuid.UUID, *, after_event_id: int = 0, limit: int = 1000) -> list[JobEvent]:
        await self.get(job_id)
        return await self.repo.list_events(job_id, after_event_id, limit)

    async def list(
        self,
        *,
        queue: str | None = None,
        task: str | None = None,
        statuses: list[str] | None = None,
        created_from: datetime | None = None,
        created_to: datetime | None = None,
        cursor: str | None = None,
        limit: int = 100,
    ) -> JobPage:
        """Jobs newest first, `limit` at a time (without args); pass the page's `next_cursor` to
        get the next one."""
        if not 1 <= limit <= MAX_LIST_LIMIT:
            raise InvalidJobRequest(f"limit must be between 1 and {MAX_LIST_LIMIT}")
        known = {status.value for status in JobStatus}
        unknown = sorted({str(s) for s in statuses or ()} - known)
        if unknown:  # the validation_error HTTP's enum query parameter gives
            message = f"unknown status {', '.join(unknown)}; known: {', '.join(sorted(known))}"
            raise ValidationFailed(f"status: {message}", [{"loc": ["status"], "msg": message, "type": "enum"}])
        # One row more than asked tells whether another page exists without a count(*).
        listing = JobListing(queue, task, [str(s) for s in statuses] if statuses else None, created_from, created_to)
        jobs = [job.shown() for job in await self.repo.list_jobs(
            listing, before=decode_cursor(cursor) if cursor else None, limit=limit + 1)]
        if len(jobs) <= limit:
            return JobPage(jobs, None)
        last = jobs[limit - 1]
        return JobPage(jobs[:limit], encode_cursor(last.created_at, last.id))


def check_priority(priority: Any) -> int:
    """A priority as every face takes it (JobRequest's field: an int, not text or a bool, 0..2^31-1),
    or the validation_error HTTP gives the same value."""
    if isinstance(priority, bool) or not isinstance(priority, int):
        problem, kind = "must be a whole number", "int_type"
    elif not 0 <= priority <= PG_INT_MAX:
        problem, kind = f"must be between 0 and {PG_INT_MAX}", "int_range"
    else:
        return priority
    raise ValidationFailed(f"priority: {problem}", [{"loc": ["priority"], "msg": problem, "type": kind}])


def unique_window_key(req: JobRequest, now: datetime) -> str:
    """The idempotency key that makes `unique_for_sec` hold: one per task, queue, unique_key (or
    args) and window. Windows are aligned to the Unix epoch (an hourly window runs from one full hour
    to the next), so the database's unique index, not a lock or a lookup, keeps the promise under
    any concurrency; a repeat in the same window returns the job already there, whatever its status."""
    assert req.unique_for_sec is not None
    return _unique_window_key(req.queue, req.task, req.unique_key, req.args, req.unique_for_sec, now)


def _unique_window_key(queue: str, task: str, unique_key: str | None, args: dict[str, Any], unique_for_sec: int,
                       now: datetime) -> str:
    basis = unique_key if unique_key is not None else json.dumps(args, sort_keys=True, default=str)
    digest = hashlib.sha256("\x00".join((queue, task, basis)).encode("utf-8", "surrogatepass"))
    window = int(now.timestamp() // unique_for_sec) * unique_for_sec
    return f"dl:unique:{digest.hexdigest()[:40]}:{unique_for_sec}:{window}"


def encode_cursor(created_at: datetime, job_id: uuid.UUID) -> str:
    """An opaque listing cursor: the (created_at, job_id) of a page's last job."""
    raw = json.dumps([created_at.isoformat(), str(job_id)], separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(cursor: str) -> tuple[datetime, uuid.UUID]:
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        created_at, job_id = json.loads(raw)
        when = datetime.fromisoformat(created_at)
        if when.tzinfo is None:
            raise ValueError("naive time")
        return when, uuid.UUID(job_id)
    except (binascii.Error, ValueError, TypeError, UnicodeDecodeError, RecursionError):
        raise InvalidCursor("cursor is not one this API returned; start again without it") from None


def status_view(job: Job) -> dict[str, Any]:
    """The 003 §5 status body."""
    return {
        "job_id": str(job.id),
        "status": job.status.value,
        "attempt": job.attempt,
        "started_at": iso(job.started_at) if job.started_at else None,
        "finished_at": iso(job.finished_at) if job.finished_at else None,
        "heartbeat_at": iso(job.heartbeat_at) if job.heartbeat_at else None,
        "error": job.error,
        "progress": job.progress,
        "result": job.result,
    }
