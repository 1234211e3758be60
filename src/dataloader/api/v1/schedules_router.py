"""API v1 schedules: create, list (with the next run times), read, pause, resume, delete, and the
history of what each tick enqueued. Errors have the jobs API's shape (`{error, detail}`); a body
that fails validation (a bad cron, an unknown zone, NUL characters, numbers out of range) is a 422
and writes nothing. The rules are `dataloader.schedules.manager.ScheduleManager`'s."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Path, Query, Response, status
from pydantic import BaseModel, ConfigDict, Field

from dataloader.api.runtime import Runtime, get_runtime, require_token
from dataloader.api.v1.exceptions import error_responses
from dataloader.api.v1.models import ErrorCode
from dataloader.api.v1.schemas import Rfc3339Time
from dataloader.api.v1.utils import location
from dataloader.model.schedule import NAME_PATTERN, Schedule, ScheduleSpec
from dataloader.model.storable import StorableFields
from dataloader.schedules.manager import MAX_HISTORY_LIMIT, ScheduleManager

router = APIRouter(prefix="/api/v1/schedules", tags=["schedules"], dependencies=[Depends(require_token)])

UPCOMING = 5


async def get_schedule_manager(runtime: Runtime = Depends(get_runtime)) -> ScheduleManager:
    return runtime.require_app().schedules


Api = Annotated[ScheduleManager, Depends(get_schedule_manager)]
Name = Annotated[str, Path(min_length=1, max_length=200, pattern=NAME_PATTERN, description="The schedule's name")]


class ScheduleCreateRequest(StorableFields, ScheduleSpec):
    """The body of `POST /api/v1/schedules`: exactly one of `cron` and `every_sec`. Unknown fields
    are refused."""

    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [
        {"name": "report.daily", "task": "report.daily", "cron": "0 2 * * *", "tz": "Europe/Berlin",
         "args": {"kind": "daily"}, "queue": "reports", "missed": "run_once"},
        {"name": "sync.every-5m", "task": "sync.crm", "every_sec": 300, "missed": "skip"},
    ]})


class ScheduleResponse(BaseModel):
    name: str
    task: str
    queue: str
    args: Any
    cron: str | None
    every_sec: float | None
    tz: str
    missed: str = Field(description="Missed-tick policy: skip, run_once or catch_up")
    catch_up_limit: int
    grace_sec: int
    lock_key: str | None
    priority: int
    max_attempts: int | None
    lease_ttl_sec: int | None
    paused: bool
    source: str = Field(description="code (declared with @schedule, upserted at start) or api")
    next_run_at: datetime = Field(description="The next due tick (kept as it was while paused)")
    upcoming: list[datetime] = Field(description=f"The next {UPCOMING} run times (empty while paused)")
    last_run_at: datetime | None = Field(description="The last tick that enqueued a job")
    created_at: datetime
    updated_at: datetime


class ScheduleListResponse(BaseModel):
    schedules: list[ScheduleResponse]


class ScheduleRunResponse(BaseModel):
    tick_at: datetime = Field(description="The due time of the tick")
    job_id: uuid.UUID = Field(description="The job it enqueued (idempotency_key schedule:<name>:<tick>)")
    job_status: str | None = Field(description="The job's status now (null once the job was deleted)")
    enqueued_at: datetime
    lag_sec: float = Field(description="How late after the tick the job was enqueued")
    skipped_before: int = Field(description="Missed ticks skipped (policy) just before this one")


class ScheduleHistoryResponse(BaseModel):
    name: str
    runs: list[ScheduleRunResponse] = Field(description="Newest tick first")


def _view(api: ScheduleManager, schedule: Schedule) -> ScheduleResponse:
    body = schedule.to_dict()
    body.pop("revision", None)
    return ScheduleResponse(**body, upcoming=api.upcoming(schedule, UPCOMING))


@router.post("", status_code=status.HTTP_201_CREATED, response_model=ScheduleResponse,
             summary="Create a schedule",
             responses=error_responses(ErrorCode.invalid_json, ErrorCode.unsupported_media_type,
                                       ErrorCode.invalid_request, ErrorCode.schedule_exists))
async def create_schedule(body: ScheduleCreateRequest, response: Response, api: Api) -> ScheduleResponse:
    """A cron schedule (`cron`, in `tz`) or an interval (`every_sec`). Its first tick is the first
    after now. 409 when the name exists."""
    schedule = await api.create(ScheduleSpec.model_validate(body.model_dump()))
    response.headers["Location"] = location("api", "v1", "schedules", schedule.name)
    return _view(api, schedule)


@router.get("", response_model=ScheduleListResponse, summary="List schedules with their next run times",
            responses=error_responses())
async def list_schedules(api: Api) -> ScheduleListResponse:
    return ScheduleListResponse(schedules=[_view(api, s) for s in await api.list()])


@router.get("/{name}", response_model=ScheduleResponse, summary="One schedule",
            responses=error_responses(ErrorCode.schedule_not_found))
async def get_schedule(name: Name, api: Api) -> ScheduleResponse:
    return _view(api, await api.get(name))


@router.post("/{name}/pause", response_model=ScheduleResponse, summary="Pause a schedule",
             responses=error_responses(ErrorCode.schedule_not_found))
async def pause_schedule(name: Name, api: Api) -> ScheduleResponse:
    """No tick enqueues while paused. Idempotent."""
    return _view(api, await api.pause(name))


@router.post("/{name}/resume", response_model=ScheduleResponse, summary="Resume a paused schedule",
             responses=error_responses(ErrorCode.schedule_not_found, ErrorCode.invalid_request))
async def resume_schedule(name: Name, api: Api) -> ScheduleResponse:
    """The next tick is the first after now: ticks of the pause are not caught up. Idempotent."""
    return _view(api, await api.resume(name))


@router.delete("/{name}", status_code=status.HTTP_204_NO_CONTENT, summary="Delete a schedule and its history",
               responses=error_responses(ErrorCode.schedule_not_found))
async def delete_schedule(name: Name, api: Api) -> Response:
    """Jobs it already enqueued stay. A schedule declared in code comes back at the next start
    unless its `@schedule` is removed."""
    await api.delete(name)
    return Response(status_code=status.HTTP_204_NO_CONTENT)


@router.get("/{name}/history", response_model=ScheduleHistoryResponse,
            summary="What each tick enqueued, newest first",
            responses=error_responses(ErrorCode.schedule_not_found))
async def schedule_history(
    name: Name,
    api: Api,
    before: Annotated[Rfc3339Time | None, Query(description="Only ticks before this (RFC 3339): the next page")] = None,
    limit: Annotated[int, Query(ge=1, le=MAX_HISTORY_LIMIT)] = 100,
) -> ScheduleHistoryResponse:
    runs = await api.history(name, before=before, limit=limit)
    return ScheduleHistoryResponse(name=name, runs=[ScheduleRunResponse(
        tick_at=r.tick_at, job_id=r.job_id, job_status=r.job_status, enqueued_at=r.enqueued_at,
        lag_sec=r.lag_sec, skipped_before=r.skipped_before) for r in runs])
