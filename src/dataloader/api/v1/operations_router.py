"""API v1 of recovery and operations (docs/operations.md): `POST /api/v1/search` (the
operator's filter, cursor paging, counts) and `/api/v1/operations` (tracked bulk requeue, cancel,
delete, set_priority: start or dry run, list, get, pause, resume, cancel, audit trail). Errors
have the jobs API's shape; a bad filter (unknown status, reversed range, bad jsonpath, NUL
characters) is a 4xx and writes nothing."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Body, Depends, Path, Query, Request, Response
from pydantic import BaseModel, ConfigDict, Field

from dataloader.api.access import require
from dataloader.api.runtime import Runtime, get_runtime, require_token
from dataloader.api.v1.exceptions import error_responses
from dataloader.api.v1.models import ErrorCode
from dataloader.api.v1.schemas import JobSummary
from dataloader.jobs.manager import MAX_LIST_LIMIT
from dataloader.model.job_filter import JobFilter
from dataloader.model.operation import STATES, DryRun
from dataloader.model.principal import Action
from dataloader.operations.manager import MAX_BATCH_SIZE, MAX_OPERATIONS_LIMIT, OperationManager

router = APIRouter(prefix="/api/v1", tags=["operations"], dependencies=[Depends(require_token)])


class SearchRequest(JobFilter):
    """The filter's fields, and the page wanted."""

    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [
        {"statuses": ["failed"], "queues": ["load"], "error": "*ConnectionResetError*",
         "finished_from": "2030-01-01T02:00:00Z", "limit": 100, "count": True},
    ]})

    cursor: str | None = Field(default=None, max_length=1000, description="next_cursor of the previous page")
    limit: int = Field(default=100, ge=1, le=MAX_LIST_LIMIT)
    count: bool = Field(default=False, strict=True, description="Also count every match (capped at 10 million)")


class SearchJob(JobSummary):
    queue_overdue_at: datetime | None = Field(default=None, description="When it was found waiting past its queue's "
                                              "time limit (null: not since it last became runnable)")
    held_at: datetime | None = Field(default=None, description="When it was held for an operator (null: not held)")
    held_reason: str | None = None


class SearchResponse(BaseModel):
    jobs: list[SearchJob] = Field(description="Newest first (without args)")
    next_cursor: str | None = Field(description="Pass as `cursor` for the next page; null on the last page")
    count: int | None = Field(description="How many match in all (when asked for)")
    count_capped: bool = Field(description="count is a lower bound: at least that many match")
    filter: dict[str, Any] = Field(description="The filter as understood")


@router.post("/search", response_model=SearchResponse,
             summary="Search jobs by queue, task, status, error pattern, time ranges, args, lock_key prefix",
             responses=error_responses(ErrorCode.invalid_json, ErrorCode.unsupported_media_type,
                                       ErrorCode.invalid_request, ErrorCode.invalid_cursor,
                                       ErrorCode.too_many_queries, ErrorCode.query_timeout))
async def search(runtime: Annotated[Runtime, Depends(get_runtime)],
                 body: Annotated[SearchRequest | None, Body()] = None) -> Any:
    body = body or SearchRequest()
    f = JobFilter.model_validate(body.model_dump(exclude={"cursor", "limit", "count"}))
    page = await runtime.require_app().search(f, cursor=body.cursor, limit=body.limit, count=body.count)
    fields = SearchJob.model_fields
    return {"jobs": [SearchJob(job_id=j.id, **{n: getattr(j, n) for n in fields if n != "job_id"})
                     for j in page.jobs],
            "next_cursor": page.next_cursor, "count": page.count, "count_capped": page.count_capped,
            "filter": page.filter}


# --- bulk operations ------------------------------------------------------------------------------

OperationKind = Literal["requeue", "cancel", "delete", "set_priority"]
OperationState = Literal[STATES]  # the states of model/operation.py, in their order
Actor = Annotated[str, Field(min_length=1, max_length=200, pattern=r"^[^\x00]*$")]


class OperationRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [
        {"kind": "requeue", "filter": {"statuses": ["failed"], "queues": ["load"],
                                       "finished_from": "2030-01-01T02:00:00Z"}, "dry_run": True},
        {"kind": "set_priority", "filter": {"queues": ["load"], "statuses": ["queued"]}, "params": {"priority": 10},
         "started_by": "alice"},
    ]})

    kind: OperationKind
    filter: JobFilter = Field(default_factory=JobFilter, description="The search's filter")
    params: dict[str, Any] = Field(default_factory=dict, description='set_priority: {"priority": n}')
    dry_run: bool = Field(default=False, strict=True, description="Only count the jobs it would examine; start nothing")
    started_by: Actor = Field(default="api", description="Who starts it (kept in its audit trail)")
    batch_size: int | None = Field(default=None, ge=1, le=MAX_BATCH_SIZE)


class ActorRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    actor: Actor = Field(default="api", description="Who asks (kept in the audit trail)")


class OperationResponse(BaseModel):
    operation_id: uuid.UUID
    kind: str
    filter: dict[str, Any]
    params: dict[str, Any]
    state: OperationState
    total: int = Field(description="Jobs the filter matched at the start (the dry-run count)")
    done: int = Field(description="Jobs examined so far (progress: done / total)")
    changed: int = Field(description="Of those, jobs changed")
    skipped: int = Field(description="Of those, jobs no longer eligible when their batch ran")
    failed: int = Field(default=0, description="Of those, refused for a reason of their own (a workflow run that "
                                               "never recorded the step to restart from)")
    batch_size: int
    started_by: str
    created_at: datetime
    updated_at: datetime
    snapshot_at: datetime = Field(description="Jobs created after this are left alone")
    finished_at: datetime | None
    runner: str | None = Field(description="The node working it now (null between runners)")
    lease_expires_at: datetime | None
    error: str | None


class DryRunResponse(BaseModel):
    dry_run: Literal[True]
    kind: str
    filter: dict[str, Any]
    params: dict[str, Any]
    total: int = Field(description="Jobs it would examine")
    by_status: dict[str, int] | None = Field(default=None, description="A workflow operation's: the runs by status")
    sample: list[dict[str, Any]] | None = Field(
        default=None, description="A workflow operation's: the first runs it would examine, oldest first")


class OperationListResponse(BaseModel):
    operations: list[OperationResponse] = Field(description="Newest first")
    next_cursor: str | None


class OperationEventResponse(BaseModel):
    event_id: int
    ts: datetime
    kind: str = Field(description="created, started, taken_over, paused, resumed, canceled, finished, failed; "
                                  "skipped (what a batch did not change, and why), changed (the workflow runs a "
                                  "batch changed)")
    actor: str | None
    payload: Any


OperationId = Annotated[uuid.UUID, Path(description="The operation's id")]


async def get_operations(runtime: Runtime = Depends(get_runtime)) -> OperationManager:
    return runtime.require_app().operations


Ops = Annotated[OperationManager, Depends(get_operations)]


@router.post("/operations", response_model=OperationResponse | DryRunResponse, status_code=201,
             summary="Start a bulk requeue / cancel / delete / set_priority over a filter (or a dry run)",
             responses={200: {"model": DryRunResponse, "description": "The dry run's count (dry_run: true)"},
                        **error_responses(ErrorCode.invalid_json, ErrorCode.unsupported_media_type,
                                          ErrorCode.invalid_request, ErrorCode.too_many_queries,
                                          ErrorCode.query_timeout)})
async def start_operation(body: OperationRequest, ops: Ops, response: Response, request: Request) -> Any:
    """The route needs `operate`; a bulk delete (not a dry run) needs `delete` as well."""
    if body.kind == "delete" and not body.dry_run:
        require(request.scope, Action.DELETE)
    result = await ops.start(body.kind, body.filter, params=body.params, started_by=body.started_by,
                             dry_run=body.dry_run, batch_size=body.batch_size)
    if isinstance(result, DryRun):
        response.status_code = 200
    return result.to_dict()


@router.get("/operations", response_model=OperationListResponse, summary="Bulk operations, newest first",
            responses=error_responses(ErrorCode.invalid_request, ErrorCode.invalid_cursor))
async def list_operations(
    ops: Ops,
    state: Annotated[list[OperationState] | None, Query(description="Repeat for several")] = None,
    cursor: Annotated[str | None, Query(max_length=1000)] = None,
    limit: Annotated[int, Query(ge=1, le=MAX_OPERATIONS_LIMIT)] = 50,
) -> Any:
    items, next_cursor = await ops.list(states=list(state) if state else None, cursor=cursor, limit=limit)
    return {"operations": [o.to_dict() for o in items], "next_cursor": next_cursor}


@router.get("/operations/{operation_id}", response_model=OperationResponse, summary="One operation and its progress",
            responses=error_responses(ErrorCode.operation_not_found))
async def get_operation(operation_id: OperationId, ops: Ops) -> Any:
    return (await ops.get(operation_id)).to_dict()


@router.get("/operations/{operation_id}/events", response_model=list[OperationEventResponse],
            summary="The operation's audit trail (it stays after the operation ends)",
            responses=error_responses(ErrorCode.operation_not_found))
async def operation_events(operation_id: OperationId, ops: Ops) -> Any:
    return [e.to_dict() for e in await ops.events(operation_id)]


def _state_route(action: str, summary: str) -> None:
    async def change(operation_id: OperationId, ops: Ops,
                     body: Annotated[ActorRequest | None, Body()] = None) -> Any:
        actor = (body or ActorRequest()).actor
        return (await getattr(ops, action)(operation_id, actor=actor)).to_dict()

    change.__name__ = f"{action}_operation"
    router.post(f"/operations/{{operation_id}}/{action}", response_model=OperationResponse, summary=summary,
                responses=error_responses(ErrorCode.operation_not_found, ErrorCode.operation_state_conflict,
                                          ErrorCode.invalid_json, ErrorCode.unsupported_media_type))(change)


_state_route("pause", "Pause after the batch in flight")
_state_route("resume", "Resume a paused operation from where it stopped")
_state_route("cancel", "Cancel for good after the batch in flight (what was done stays done)")
