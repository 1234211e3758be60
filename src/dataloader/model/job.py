"""The job as users and every layer above storage see it: one typed, immutable value, and the one
status vocabulary (003 §4's `dl_status`). Storage turns rows into these; services, the HTTP API, the
CLI and user code only ever handle them."""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any

from dataloader.model.clock import iso, iso_times
from dataloader.model.payload_crypto import shown


class JobStatus(StrEnum):
    """The 003 §4 `dl_status` values."""

    queued = "queued"
    running = "running"
    succeeded = "succeeded"
    failed = "failed"
    canceled = "canceled"
    lost = "lost"

    @property
    def finished(self) -> bool:
        return self in FINISHED_STATUSES


# The statuses a job ends in, in the order retention, stats and their messages name them.
FINISHED_STATUS_NAMES: tuple[str, ...] = tuple(
    s.value for s in (JobStatus.succeeded, JobStatus.canceled, JobStatus.failed, JobStatus.lost))
FINISHED_STATUSES = frozenset(JobStatus(s) for s in FINISHED_STATUS_NAMES)
ACTIVE_STATUSES = frozenset({JobStatus.queued, JobStatus.running})
# What `retry` may bring back to the queue.
RETRYABLE_STATUSES = frozenset({JobStatus.failed, JobStatus.canceled, JobStatus.lost})


@dataclass(frozen=True, slots=True)
class Job:
    """A row of `dl_jobs`. `args` is None in listings (they leave it out: it can be large or
    secret); every other read carries it."""

    id: uuid.UUID
    queue: str
    task: str
    args: Any
    lock_key: str
    status: JobStatus
    attempt: int
    max_attempts: int
    priority: int
    available_at: datetime
    created_at: datetime
    idempotency_key: str | None = None
    partition_key: str = ""
    lease_ttl_sec: int = 60
    lease_expires_at: datetime | None = None
    heartbeat_at: datetime | None = None
    cancel_requested: bool = False
    progress: Any = None
    error: str | None = None
    producer: str | None = None
    consumer_group: str | None = None
    started_at: datetime | None = None
    finished_at: datetime | None = None
    # What the pipeline returned when the job succeeded (any JSON; None: nothing, or not finished).
    result: Any = None
    # The job's own run-time limit in seconds (None: the pipeline's, or none).
    timeout_sec: int | None = None
    # Chains (docs/patterns.md "Chains and stages"): the first job of the run (None: no chain),
    # the stage whose success enqueued this one, and the stages planned after this one.
    chain_id: uuid.UUID | None = None
    parent_job_id: uuid.UUID | None = None
    chain_next: Any = None
    # Recovery: when the job was found waiting past its queue's time limit (None: not
    # since it last became runnable), and when and why it was held for an operator (a held job is
    # a `failed` one kept for release or discard).
    queue_overdue_at: datetime | None = None
    held_at: datetime | None = None
    held_reason: str | None = None

    @property
    def job_id(self) -> uuid.UUID:
        """The spec's name for `id`."""
        return self.id

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> Job:
        """From a `dl_jobs` row (any subset of columns that includes the required ones)."""
        get = row.get if hasattr(row, "get") else lambda key, default=None: row[key]
        return cls(
            id=row["job_id"], queue=row["queue"], task=row["task"], args=get("args"),
            lock_key=row["lock_key"], status=JobStatus(row["status"]), attempt=row["attempt"],
            max_attempts=row["max_attempts"], priority=row["priority"], available_at=row["available_at"],
            created_at=row["created_at"], idempotency_key=get("idempotency_key"),
            partition_key=get("partition_key", "") or "", lease_ttl_sec=get("lease_ttl_sec", 60),
            lease_expires_at=get("lease_expires_at"), heartbeat_at=get("heartbeat_at"),
            cancel_requested=bool(get("cancel_requested", False)), progress=get("progress"),
            error=get("error"), producer=get("producer"), consumer_group=get("consumer_group"),
            started_at=get("started_at"), finished_at=get("finished_at"), result=get("result"),
            timeout_sec=get("timeout_sec"), chain_id=get("chain_id"), parent_job_id=get("parent_job_id"),
            chain_next=get("chain_next"), queue_overdue_at=get("queue_overdue_at"),
            held_at=get("held_at"), held_reason=get("held_reason"),
        )

    def shown(self) -> Job:
        """As the principal in force may see it: args, progress and result masked without
        READ_PAYLOAD (model/payload_crypto.py)."""
        return shown(self, "args", "progress", "result")

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: ids and times as strings, the status as its value."""
        data = asdict(self)
        data["job_id"] = str(data.pop("id"))
        data["status"] = self.status.value
        for key in ("chain_id", "parent_job_id"):
            if data[key] is not None:
                data[key] = str(data[key])
        return iso_times(data)


@dataclass(frozen=True, slots=True)
class JobListing:
    """What a plain listing of jobs (`App.list`, `GET /api/v1/jobs`, `dataloader jobs list`) matches,
    checked by the jobs manager; None matches any. The operator's search has its richer JobFilter."""

    queue: str | None = None
    task: str | None = None
    statuses: list[str] | None = None
    created_from: datetime | None = None
    created_to: datetime | None = None


@dataclass(frozen=True, slots=True)
class JobEvent:
    """A row of the journal, `dl_job_events`."""

    event_id: int
    job_id: uuid.UUID
    queue: str
    ts: datetime
    kind: str
    payload: Any

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> JobEvent:
        return cls(event_id=row["event_id"], job_id=row["job_id"], queue=row["queue"], ts=row["ts"],
                   kind=row["kind"], payload=row["payload"])

    def to_dict(self) -> dict[str, Any]:
        return {"event_id": self.event_id, "job_id": str(self.job_id), "queue": self.queue,
                "ts": iso(self.ts), "kind": self.kind, "payload": self.payload}


@dataclass(frozen=True, slots=True)
class JobPage:
    """One page of a listing, newest first. Pass `next_cursor` back to get the next page; it is
    None on the last one."""

    jobs: list[Job]
    next_cursor: str | None


@dataclass(frozen=True, slots=True)
class JoinState:
    """A join stage's count (`Then(..., join=...)`): its members, and those not ended yet."""

    members: int
    remaining: int

    def to_dict(self) -> dict[str, int]:
        return {"members": self.members, "remaining": self.remaining}


@dataclass(frozen=True, slots=True)
class Chain:
    """A multi-stage run: its jobs oldest first (`Job` values without args). `status`: `running`
    while a stage is queued or running, `succeeded` when every stage did and none is planned
    after the last, otherwise the terminal status of the stage that stopped it. `joins`: each
    join stage's count, by its job id (a queued join waits for `remaining` more ends)."""

    chain_id: uuid.UUID
    jobs: list[Job]
    joins: dict[uuid.UUID, JoinState] = field(default_factory=dict)

    @property
    def status(self) -> str:
        if any(job.status in ACTIVE_STATUSES for job in self.jobs):
            return "running"
        stopped = [job for job in self.jobs if job.status is not JobStatus.succeeded]
        if stopped:
            return stopped[-1].status.value
        return "succeeded"

    def to_dict(self) -> dict[str, Any]:
        return {"chain_id": str(self.chain_id), "status": self.status,
                "stages": [self._stage(job) for job in self.jobs]}

    def _stage(self, job: Job) -> dict[str, Any]:
        stage = {k: v for k, v in job.to_dict().items() if k != "args"}
        if job.id in self.joins:
            stage["join"] = self.joins[job.id].to_dict()
        return stage
