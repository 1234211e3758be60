"""API v1 routes of retention and stats (docs/patterns.md "Retention" and "Stats"):
`GET /api/v1/stats`, `GET /api/v1/stats/errors`, `GET /api/v1/retention`,
`GET /api/v1/retention/partitions` (the journal's, retention/partitions.py) and
`POST /api/v1/maintenance/prune` (a dry run unless asked otherwise).

Reads only, except the prune: every input is checked before anything runs, so bad input is a
4xx in the usual error shape and writes nothing.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Body, Depends, Query
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictFloat,
    StrictInt,
    StrictStr,
)

from dataloader.api.runtime import Runtime, get_runtime, require_token
from dataloader.api.v1.exceptions import ApiError, error_responses
from dataloader.api.v1.models import ErrorCode
from dataloader.api.v1.schemas import Rfc3339Time
from dataloader.config import Settings
from dataloader.model.job import FINISHED_STATUS_NAMES

router = APIRouter(prefix="/api/v1", tags=["stats"], dependencies=[Depends(require_token)])

EARLIEST = datetime(1970, 1, 1, tzinfo=UTC)
LATEST = datetime(9999, 1, 1, tzinfo=UTC)
MAX_RANGE = timedelta(days=366)
QueueName = Annotated[str | None, Query(min_length=1, max_length=200, pattern=r"^[^\x00]*$",
                                        description="One queue; all queues when absent")]
FinishedStatus = Literal[FINISHED_STATUS_NAMES]  # the statuses of model/job.py, in their order


class Timing(BaseModel):
    count: int = Field(description="Jobs measured (those whose last attempt ran)")
    mean: float | None = Field(description="Seconds")
    p95: float | None = Field(description="Seconds, from a histogram with buckets 25 % apart")
    max: float | None = Field(description="Seconds")


class HourStats(BaseModel):
    hour: datetime = Field(description="Start of the hour (UTC)")
    finished: dict[str, int] = Field(description="Jobs finished in the hour, by status")
    total: int
    run_sec: Timing = Field(description="Last attempt's run time: its claim to finished_at")
    wait_sec: Timing = Field(description="Last attempt's wait: runnable (max(created_at, available_at)) to claim")


class OldestWaiting(BaseModel):
    job_id: str
    task: str
    available_at: datetime
    age_sec: float | None


class QueueStats(BaseModel):
    queue: str
    finished: dict[str, int] = Field(description="Jobs finished in the range, by status")
    total: int
    run_sec: Timing
    wait_sec: Timing
    oldest_waiting: OldestWaiting | None = Field(description="The oldest queued job that is due (live, not rolled up)")
    hours: list[HourStats]


class StatsResponse(BaseModel):
    from_: datetime = Field(alias="from", description="Start of the first hour included")
    to: datetime
    rolled_up_to: datetime | None = Field(description="Jobs finished before this are counted (rollup watermark)")
    queues: list[QueueStats]

    model_config = ConfigDict(populate_by_name=True)


class ErrorGroup(BaseModel):
    queue: str
    error: str = Field(description="First line of the error text, trimmed, at most 200 characters")
    jobs: int
    last_at: datetime
    last_job_id: str


class ErrorsResponse(BaseModel):
    since: datetime = Field(description="Start of the first hour included")
    errors: list[ErrorGroup]


class RetentionResponse(BaseModel):
    enabled: bool = Field(description="DL_RETENTION_ENABLED: the leader prunes every period_sec")
    period_sec: float
    batch_size: int
    default_sec: dict[str, float] = Field(description="Age in seconds after which a finished job goes, by status")
    queues_sec: dict[str, dict[str, float]] = Field(description="Per-queue ages (DL_RETENTION_QUEUES_JSON)")


class JournalPartitionResponse(BaseModel):
    name: str
    from_: datetime | None = Field(alias="from", description="Lower bound (inclusive); null: from the beginning "
                                                             "(the legacy partition) or the DEFAULT partition")
    to: datetime | None = Field(description="Upper bound (exclusive); null: the DEFAULT partition")
    default: bool = Field(description="The DEFAULT partition: rows no range covers, and the kept rows of dropped ones")
    rows_estimate: int | None = Field(description="The planner's estimate; null before the first ANALYZE")
    bytes: int | None = Field(description="Size on disk, indexes and TOAST included")

    model_config = ConfigDict(populate_by_name=True)


class NextDropResponse(BaseModel):
    partition: str
    at: datetime = Field(description="When it is past the horizon (its upper bound + horizon_sec)")


class JournalPartitionsResponse(BaseModel):
    partitioned: bool = Field(description="Whether dl_job_events is partitioned (migration 0039)")
    enabled: bool = Field(description="DL_JOURNAL_PARTITIONS_ENABLED: the leader creates partitions ahead")
    drop: bool = Field(description="Whether old partitions are dropped (DL_JOURNAL_PARTITIONS_DROP and a "
                                   "retention for succeeded jobs)")
    interval_sec: float = Field(description="Width of a partition (DL_JOURNAL_PARTITIONS_INTERVAL)")
    horizon_sec: float | None = Field(description="A partition goes once its upper bound is this old "
                                                  "(DL_RETENTION_SUCCEEDED); null: never")
    ahead: int = Field(description="How many intervals ahead partitions exist (DL_JOURNAL_PARTITIONS_AHEAD)")
    now: datetime
    next_drop: NextDropResponse | None
    partitions: list[JournalPartitionResponse]


class QueueDepthResponse(BaseModel):
    queue: str
    queued: int = Field(description="Queued jobs that are due (runnable now)")
    delayed: int = Field(description="Queued jobs waiting for their available_at (backoff, timers, delays)")
    running: int
    held: int = Field(description="Held (dead-letter) jobs: failed and kept for an operator")
    oldest_waiting_sec: float | None = Field(description="Age of the oldest due job; null when none is due")
    shard: str | None = Field(None, description="The shard (DL_SHARDS_JSON) that holds these jobs; present "
                                                "only when there are several shards")


class QueueDepthsResponse(BaseModel):
    queues: list[QueueDepthResponse] = Field(description="Every queue with live or held jobs, by name")


class PruneRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    dry_run: bool = Field(default=True, strict=True, description="Only count (the default); false deletes")
    # strict: `true` is not an age (lax parsing took it as 1 s, matching every finished job)
    older_than: StrictStr | StrictInt | StrictFloat | None = Field(
        default=None, description='One age for every chosen status ("7d", "12h", seconds); '
                                  "default: the configured retention")
    statuses: list[FinishedStatus] | None = Field(default=None, max_length=4)
    queues: list[Annotated[str, Field(min_length=1, max_length=200, pattern=r"^[^\x00]*$")]] | None = Field(
        default=None, max_length=100)


class PrunedGroup(BaseModel):
    queue: str
    status: str
    jobs: int
    older_than_sec: float


class PruneResponse(BaseModel):
    dry_run: bool
    total: int
    batches: int
    seconds: float
    pruned: list[PrunedGroup]
    archived_files: int | None = Field(default=None,
                                       description="With DL_ARCHIVE_URL: files exported before the deletes")
    archive_error: str | None = Field(
        default=None, description="With DL_ARCHIVE_URL: the export that failed and stopped the prune (nothing of "
                                  "that batch was deleted)")


def _check_time(name: str, value: datetime) -> datetime:
    if not EARLIEST <= value <= LATEST:
        raise ApiError(ErrorCode.invalid_request, f"{name} must be between 1970-01-01 and 9999-01-01")
    return value


@router.get("/stats", response_model=StatsResponse, response_model_by_alias=True,
            summary="Finished jobs per queue and hour: counts by status, run and wait time, oldest waiting",
            responses=error_responses(ErrorCode.invalid_request))
async def stats(
    runtime: Annotated[Runtime, Depends(get_runtime)],
    queue: QueueName = None,
    from_: Annotated[Rfc3339Time | None, Query(alias="from", description="RFC 3339; default: `to` - 24 h")] = None,
    to: Annotated[Rfc3339Time | None, Query(description="RFC 3339; default: now")] = None,
    unrolled: Annotated[Literal["true", "false"], Query(
        description="`true`: the finished counts also hold the jobs the rollup has not counted yet "
                    "(read from dl_jobs in the same snapshot; their times are not in the timings)")] = "false",
) -> Any:
    """From the hourly rollup the leader keeps (DL_STATS_PERIOD_SEC): hours whose start lies in
    [from, to), at most 366 days. Jobs finished in the last DL_STATS_LAG_SEC are not counted yet,
    unless `unrolled=true` (what the console's overview shows)."""
    end = _check_time("to", to or datetime.now(UTC))
    start = _check_time("from", from_ or end - timedelta(hours=24))
    if start >= end:
        raise ApiError(ErrorCode.invalid_request, "from must be before to")
    if end - start > MAX_RANGE:
        raise ApiError(ErrorCode.invalid_request, "from and to may be at most 366 days apart")
    return await runtime.require_app().stats(queue=queue, start=start, end=end, unrolled=unrolled == "true")


@router.get("/stats/depths", response_model=QueueDepthsResponse, response_model_exclude_unset=True,
            summary="Each queue's depth now: due, delayed, running and held jobs, oldest due age",
            responses=error_responses())
async def queue_depths(runtime: Annotated[Runtime, Depends(get_runtime)]) -> QueueDepthsResponse:
    """Read from dl_jobs now (not the rollup), on all nodes; what the console's overview shows."""
    depths = await runtime.require_app().queue_depths()
    return QueueDepthsResponse(queues=[QueueDepthResponse(**d.to_dict()) for d in depths])


@router.get("/stats/errors", response_model=ErrorsResponse,
            summary="Failed and lost jobs grouped by error text, most frequent first",
            responses=error_responses(ErrorCode.invalid_request))
async def stats_errors(
    runtime: Annotated[Runtime, Depends(get_runtime)],
    queue: QueueName = None,
    since: Annotated[Rfc3339Time | None,
                     Query(description="RFC 3339, floored to the hour; default: an hour ago")] = None,
    limit: Annotated[int, Query(ge=1, le=500)] = 20,
) -> Any:
    """"Top errors in the last hour": failures of the hours from `since` on, grouped by the first
    line of their error (trimmed, at most 200 characters)."""
    start = _check_time("since", since or datetime.now(UTC) - timedelta(hours=1))
    return await runtime.require_app().stats_errors(queue=queue, since=start, limit=limit)


@router.get("/retention", response_model=RetentionResponse, summary="The retention settings of this node",
            responses=error_responses())
async def retention(runtime: Annotated[Runtime, Depends(get_runtime)]) -> Any:
    settings: Settings = runtime.settings
    from dataloader.retention.policy import RetentionPolicy

    return {"enabled": settings.retention_enabled, "period_sec": settings.retention_period_sec,
            "batch_size": settings.retention_batch_size, **RetentionPolicy.from_settings(settings).describe()}


@router.get("/retention/partitions", response_model=JournalPartitionsResponse, response_model_by_alias=True,
            summary="The journal's partitions: ranges, row estimates and the next drop", responses=error_responses())
async def retention_partitions(runtime: Annotated[Runtime, Depends(get_runtime)]) -> Any:
    """As `app.retention_partitions()` and `dataloader retention partitions` (docs/retention.md)."""
    return await runtime.require_app().retention_partitions()


@router.post("/maintenance/prune", response_model=PruneResponse,
             summary="Prune finished jobs now (a dry run that only counts, unless dry_run is false)",
             responses=error_responses(ErrorCode.invalid_json, ErrorCode.unsupported_media_type,
                                       ErrorCode.invalid_request))
async def prune(runtime: Annotated[Runtime, Depends(get_runtime)],
                body: Annotated[PruneRequest | None, Body()] = None) -> Any:
    body = body or PruneRequest()
    older_than: float | None = None
    if body.older_than is not None:
        try:
            older_than = Settings.duration_seconds(body.older_than)
        except ValueError as exc:
            raise ApiError(ErrorCode.invalid_request, f"older_than: {exc}") from None
        if not 0 <= older_than <= 3650 * 86400:
            raise ApiError(ErrorCode.invalid_request, "older_than must be between 0 and 3650d")
    report = await runtime.require_app().prune(older_than=older_than, statuses=body.statuses,
                                                   queues=body.queues, dry_run=body.dry_run)
    return report.to_dict()
