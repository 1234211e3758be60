"""API v1 of recovery and operations (issue 11; docs/operations.md): `POST /api/v1/search` (the
operator's filter, cursor paging, counts). Errors have the jobs API's shape; a bad filter (unknown
status, reversed range, bad jsonpath, NUL characters) is a 4xx and reads nothing."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

from fastapi import APIRouter, Body, Depends
from pydantic import BaseModel, ConfigDict, Field

from dataloader.api.runtime import Runtime, get_runtime, require_token
from dataloader.api.v1.exceptions import error_responses
from dataloader.api.v1.models import ErrorCode
from dataloader.api.v1.schemas import JobSummary
from dataloader.job_filter import JobFilter
from dataloader.services.jobs import MAX_LIST_LIMIT

router = APIRouter(prefix="/api/v1", tags=["operations"], dependencies=[Depends(require_token)])


class SearchRequest(JobFilter):
    """The filter's fields, and the page wanted."""

    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [
        {"statuses": ["failed"], "queues": ["load"], "error": "*ConnectionResetError*",
         "finished_from": "2030-01-01T02:00:00Z", "limit": 100, "count": True},
    ]})

    cursor: str | None = Field(default=None, max_length=1000, description="next_cursor of the previous page")
    limit: int = Field(default=100, ge=1, le=MAX_LIST_LIMIT)
    count: bool = Field(default=False, description="Also count every match (capped at 10 million)")


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
                                       ErrorCode.invalid_request, ErrorCode.invalid_cursor))
async def search(runtime: Annotated[Runtime, Depends(get_runtime)],
                 body: Annotated[SearchRequest | None, Body()] = None) -> Any:
    body = body or SearchRequest()
    f = JobFilter.model_validate(body.model_dump(exclude={"cursor", "limit", "count"}))
    page = await runtime.require_context().search(f, cursor=body.cursor, limit=body.limit, count=body.count)
    fields = SearchJob.model_fields
    return {"jobs": [SearchJob(job_id=j.id, **{n: getattr(j, n) for n in fields if n != "job_id"})
                     for j in page.jobs],
            "next_cursor": page.next_cursor, "count": page.count, "count_capped": page.count_capped,
            "filter": page.filter}
