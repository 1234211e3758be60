"""API v1 routes (003 §5): trigger, status, cancel, plus listing and the journal of a job."""

from __future__ import annotations

import uuid
from typing import Annotated

from fastapi import APIRouter, Depends, Path, Query, Response, status

from dataloader.api.runtime import get_job_api, require_token
from dataloader.api.v1.exceptions import error_responses
from dataloader.api.v1.models import QUEUE_NOT_SERVED, WARNING_HEADER, ErrorCode, JobStatus
from dataloader.api.v1.schemas import (
    JobChanges,
    JobEventsResponse,
    JobListResponse,
    JobStatusResponse,
    JobSummary,
    Rfc3339Time,
    TriggerBatchRequest,
    TriggerBatchResponse,
    TriggerRequest,
    TriggerResponse,
)
from dataloader.api.v1.service import JobResponses
from dataloader.jobs.manager import MAX_LIST_LIMIT
from dataloader.logger.context_vars import request_id_var

# 401 and the bearer scheme are added to the OpenAPI schema only when DL_API_TOKEN is set (create_app).
router = APIRouter(prefix="/api/v1", tags=["jobs"], dependencies=[Depends(require_token)])

JobId = Annotated[uuid.UUID, Path(description="The job_id returned by trigger")]
Api = Annotated[JobResponses, Depends(get_job_api)]
# Filters are plain text; a NUL would reach PostgreSQL as an encoding error, so refuse it here.
FilterText = Annotated[str | None, Query(min_length=1, max_length=512, pattern=r"^[^\x00]*$")]


@router.post(
    "/jobs/trigger",
    status_code=status.HTTP_201_CREATED,
    response_model=TriggerResponse,
    summary="Enqueue a job (idempotent with idempotency_key)",
    responses={
        200: {"model": TriggerResponse,
              "description": "idempotency_key already named a job with the same body, unique_for_sec found "
                             "the job of its window, or a restartable trigger updated the queued job: that job"},
        **error_responses(ErrorCode.invalid_json, ErrorCode.unsupported_media_type, ErrorCode.unknown_task,
                          ErrorCode.invalid_request, ErrorCode.args_too_large,
                          ErrorCode.idempotency_conflict, ErrorCode.restart_conflict),
    },
)
async def trigger(body: TriggerRequest, response: Response, api: Api) -> TriggerResponse:
    """Insert a job (the database trigger NOTIFYs the workers). 201 for a new job; 200 with the
    existing job when `idempotency_key` was used before with the same body; 409 when it was used
    with a different one. `served: false` plus the header `X-Dataloader-Warning: queue_not_served`
    say that no worker of this process serves the queue (the job still waits for a replica that does)."""
    result = await api.trigger(body, request_id=request_id_var.get())
    if not result.created:
        response.status_code = status.HTTP_200_OK
    response.headers["Location"] = f"/api/v1/jobs/{result.job_id}/status"
    if not result.served:
        response.headers[WARNING_HEADER] = QUEUE_NOT_SERVED
    return result


@router.post(
    "/jobs/batch",
    status_code=status.HTTP_201_CREATED,
    response_model=TriggerBatchResponse,
    summary="Enqueue up to 1000 jobs in one statement",
    responses=error_responses(ErrorCode.invalid_json, ErrorCode.unsupported_media_type, ErrorCode.unknown_task,
                              ErrorCode.invalid_request, ErrorCode.args_too_large, ErrorCode.request_too_large),
)
async def trigger_batch(body: TriggerBatchRequest, response: Response, api: Api) -> TriggerBatchResponse:
    """Each item is a trigger body; all are checked before any is inserted, then one statement
    inserts them (one NOTIFY per queue). A job whose `idempotency_key` (or `unique_for_sec` window)
    already names a job is skipped, not compared. Restartable jobs and chains go one at a time
    through `/jobs/trigger` (422 here). The body limit is the trigger's (`DL_MAX_ARGS_BYTES` × 2 +
    64 KiB): split larger batches."""
    result = await api.trigger_batch(body, request_id=request_id_var.get())
    if not result.served:
        response.headers[WARNING_HEADER] = QUEUE_NOT_SERVED
    return result


@router.get(
    "/jobs/{job_id}/status",
    response_model=JobStatusResponse,
    summary="Status of a job",
    responses=error_responses(ErrorCode.job_not_found),
)
async def job_status(job_id: JobId, api: Api) -> JobStatusResponse:
    return await api.status(job_id)


@router.post(
    "/jobs/{job_id}/cancel",
    response_model=JobStatusResponse,
    summary="Cancel a job",
    responses=error_responses(ErrorCode.job_not_found, ErrorCode.job_already_finished),
)
async def cancel(job_id: JobId, api: Api) -> JobStatusResponse:
    """A queued job is canceled at once. A running one gets `cancel_requested`; its worker stops it
    at the next chunk, so the returned status may still be `running`. 409 for a finished job."""
    return await api.cancel(job_id, request_id=request_id_var.get())


@router.post(
    "/jobs/{job_id}/retry",
    response_model=JobStatusResponse,
    summary="Retry a failed, canceled or lost job",
    responses=error_responses(ErrorCode.job_not_found, ErrorCode.job_not_retryable),
)
async def retry(job_id: JobId, api: Api) -> JobStatusResponse:
    """Back to `queued` with a fresh attempt budget (the attempt number keeps counting: it fences
    every write of the job). Journaled as a `requeue` with reason `manual_retry`. 409 for a job
    that is queued, running or succeeded."""
    return await api.retry(job_id, request_id=request_id_var.get())


@router.patch(
    "/jobs/{job_id}",
    response_model=JobSummary,
    summary="Change a queued job's priority",
    responses=error_responses(ErrorCode.job_not_found, ErrorCode.job_not_queued, ErrorCode.invalid_json,
                              ErrorCode.unsupported_media_type),
)
async def change_job(job_id: JobId, body: JobChanges, api: Api) -> JobSummary:
    """The new priority (lower runs first) of a queued job, journaled as `priority_changed` with the
    old and new value; the same priority again changes nothing. 409 `job_not_queued` for a running
    or finished job: only the claim reads priority."""
    return await api.set_priority(job_id, body.priority, request_id=request_id_var.get())


@router.delete(
    "/jobs/{job_id}",
    status_code=status.HTTP_204_NO_CONTENT,
    summary="Delete a finished job with its journal",
    responses=error_responses(ErrorCode.job_not_found, ErrorCode.job_not_finished),
)
async def delete_job(job_id: JobId, api: Api) -> Response:
    """A succeeded, failed, canceled or lost job is deleted with its journal rows, as a bulk delete
    does (the log line `job deleted` is the audit record). 409 `job_not_finished` for a queued or
    running job: cancel it first."""
    await api.delete(job_id, request_id=request_id_var.get())
    return Response(status_code=status.HTTP_204_NO_CONTENT)


@router.get(
    "/jobs",
    response_model=JobListResponse,
    summary="List jobs, newest first",
    responses=error_responses(ErrorCode.invalid_cursor),
)
async def list_jobs(
    api: Api,
    queue: FilterText = None,
    task: FilterText = None,
    job_status: Annotated[list[JobStatus] | None, Query(
        alias="status", description="Repeat for several: ?status=queued&status=running")] = None,
    created_from: Annotated[Rfc3339Time | None, Query(description="created_at >= this (RFC 3339)")] = None,
    created_to: Annotated[Rfc3339Time | None, Query(description="created_at < this (RFC 3339)")] = None,
    cursor: Annotated[str | None, Query(max_length=512,
                                        description="next_cursor of the previous page")] = None,
    limit: Annotated[int, Query(ge=1, le=MAX_LIST_LIMIT)] = 100,
) -> JobListResponse:
    return await api.list(
        queue=queue, task=task, statuses=[s.value for s in job_status] if job_status else None,
        created_from=created_from, created_to=created_to, cursor=cursor, limit=limit,
    )


@router.get(
    "/jobs/{job_id}/events",
    response_model=JobEventsResponse,
    summary="The journal of a job (dl_job_events), oldest first",
    responses=error_responses(ErrorCode.job_not_found),
)
async def job_events(
    job_id: JobId,
    api: Api,
    after: Annotated[int, Query(ge=0, le=2**63 - 1, description="Only events with a larger event_id")] = 0,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
) -> JobEventsResponse:
    return await api.events(job_id, after=after, limit=limit)
