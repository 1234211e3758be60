"""Request and response bodies of API v1 (003 §5), described for the OpenAPI page at /docs."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Annotated, Any

from pydantic import (
    AfterValidator,
    AwareDatetime,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
)

from dataloader.api.v1.utils import (
    check_rfc3339,
    check_utc_representable,
)
from dataloader.jobs.manager import PG_INT_MAX, JobRequest
from dataloader.model.job import Job, JobStatus
from dataloader.model.storable import StorableFields

Rfc3339Time = Annotated[
    AwareDatetime, BeforeValidator(check_rfc3339), AfterValidator(check_utc_representable)
]


class TriggerRequest(StorableFields, JobRequest):
    """The body of `POST /api/v1/jobs/trigger`. Unknown fields are refused."""

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "examples": [{
                "queue": "default", "task": "dl.sleep", "args": {"seconds": 5},
                "lock_key": "demo", "idempotency_key": "demo-2030-01-01",
            }]
        },
    )

    # Redeclared only to be strict about the format: the service accepts any aware datetime,
    # the HTTP contract says RFC 3339.
    available_at: Rfc3339Time | None = Field(  # type: ignore[assignment]
        default=None,
        description="Earliest start, RFC 3339 with a timezone (e.g. 2030-01-01T12:00:00Z); default now",
    )


MAX_BATCH_JOBS = 1000


class TriggerBatchRequest(BaseModel):
    """The body of `POST /api/v1/jobs/batch`: up to 1000 trigger bodies, inserted by one statement."""

    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [{"jobs": [
        {"queue": "default", "task": "dl.noop", "lock_key": "a"},
        {"queue": "default", "task": "dl.noop", "lock_key": "b", "args": {"n": 2}},
    ]}]})

    jobs: list[TriggerRequest] = Field(min_length=1, max_length=MAX_BATCH_JOBS)


class TriggerBatchResponse(BaseModel):
    job_ids: list[uuid.UUID] = Field(description="The jobs inserted, in request order")
    inserted: int = Field(description="How many jobs were inserted")
    skipped: int = Field(description="Jobs not inserted: their idempotency_key (or unique_for_sec window) "
                                     "already named a job")
    served: bool = Field(description="Whether a worker of this process serves every queue of the batch")


class TriggerResponse(BaseModel):
    job_id: uuid.UUID = Field(description="Id of the job (the existing one for a repeated idempotency_key)")
    status: JobStatus = Field(description="Status of the job now")
    created: bool = Field(description="true: a new job (201); false: idempotency_key matched a job (200)")
    served: bool = Field(
        description="Whether a worker of this process serves the job's queue. false is only a warning: "
        "another replica with that queue in its WORKERS_JSON will run it."
    )


class JobStatusResponse(BaseModel):
    """The 003 §5 status body."""

    job_id: uuid.UUID
    status: JobStatus
    attempt: int = Field(description="Attempts started so far (1 while the first one runs)")
    started_at: datetime | None = Field(default=None, description="When the first attempt started")
    finished_at: datetime | None = Field(default=None, description="When the job reached a final status")
    heartbeat_at: datetime | None = Field(default=None, description="Last heartbeat of the running attempt")
    error: str | None = Field(default=None, description="Last error (kept while a retry waits)")
    # Any JSON: dataloader only writes objects, but dl_jobs is shared and a row written by another
    # producer may hold any jsonb; a status read must not fail on it.
    progress: Any = Field(default_factory=dict, description="What the pipeline last reported (an object)")
    result: Any = Field(
        default=None,
        description="What the pipeline returned when the job succeeded (any JSON value); null while it has "
        "not succeeded, when it returned nothing, or when it finished through ctx.transaction()",
    )


class JobSummary(BaseModel):
    """A job in a listing (without `args`, which can be large or sensitive)."""

    job_id: uuid.UUID
    queue: str
    task: str
    status: JobStatus
    attempt: int
    max_attempts: int
    priority: int
    lock_key: str
    partition_key: str
    idempotency_key: str | None
    cancel_requested: bool
    producer: str | None
    error: str | None
    progress: Any = Field(description="What the pipeline last reported (an object)")
    created_at: datetime
    available_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    heartbeat_at: datetime | None
    lease_expires_at: datetime | None
    timeout_sec: int | None = Field(default=None, description="The job's own run-time limit (null: the pipeline's)")

    @classmethod
    def from_job(cls, job: Job) -> JobSummary:
        data = {name: getattr(job, name) for name in cls.model_fields if name != "job_id"}
        return cls(job_id=job.id, **data)


class JobChanges(BaseModel):
    """What an operator may change on a job that exists: its priority, while it is queued."""

    model_config = ConfigDict(extra="forbid")

    # The trigger's field: a number, never text (docs/errors.md), in the same range.
    priority: int = Field(ge=0, le=PG_INT_MAX, strict=True, description="The new priority (lower runs first)")


class JobListResponse(BaseModel):
    jobs: list[JobSummary] = Field(description="Newest first")
    next_cursor: str | None = Field(
        description="Pass as `cursor` for the next page; null on the last page"
    )


class JobEvent(BaseModel):
    event_id: int = Field(description="Increasing id; pass the last one seen as `after`")
    ts: datetime
    kind: str = Field(description="queued, picked, heartbeat, requeue, done, failed, canceled, "
                                  "cancel_requested, lost. A requeue's payload.reason says why: retry, "
                                  "snooze, shutdown, lease_lost, lease_expired, worker_died, lock_busy, manual_retry")
    payload: Any = Field(
        description="Details; a 'queued' event carries the request_id of the HTTP call that enqueued it"
    )


class JobEventsResponse(BaseModel):
    job_id: uuid.UUID
    events: list[JobEvent] = Field(description="Oldest first")
    next_after: int = Field(description="Pass as `after` to get only newer events")
    has_more: bool = Field(description="true when `limit` cut the page short")


class FieldError(BaseModel):
    loc: list[str | int] = Field(description="Where the problem is, e.g. ['body', 'lock_key']")
    msg: str
    type: str


class ErrorResponse(BaseModel):
    """Every 4xx/5xx body."""

    error: str = Field(description="Stable machine-readable code (see the table in docs/http-api.md)")
    detail: str = Field(description="Human-readable explanation")
    fields: list[FieldError] | None = Field(default=None, description="Per-field problems (validation_error)")
