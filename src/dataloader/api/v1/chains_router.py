"""API v1 route of chains (docs/patterns.md "Chains and stages"):
`GET /api/v1/chains/{chain_id}` — a multi-stage run with its stage history, by the chain's id or
the id of any of its jobs. Enqueuing a chain is `POST /api/v1/jobs/trigger` with `then`."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, Path
from pydantic import BaseModel, Field

from dataloader.api.runtime import Runtime, get_runtime, require_token
from dataloader.api.v1.exceptions import error_responses
from dataloader.api.v1.models import ErrorCode, JobStatus

router = APIRouter(prefix="/api/v1", tags=["chains"], dependencies=[Depends(require_token)])


class JoinCount(BaseModel):
    members: int = Field(description="The stages this join waits for")
    remaining: int = Field(description="Those of them not ended yet")


class ChainStage(BaseModel):
    job_id: uuid.UUID
    parent_job_id: uuid.UUID | None = Field(description="The stage whose success enqueued this one")
    queue: str
    task: str
    status: JobStatus
    attempt: int
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    error: str | None
    result: Any = Field(default=None, description="What the stage's pipeline returned (any JSON)")
    chain_next: Any = Field(default=None, description="Stages still planned after this one")
    join: JoinCount | None = Field(default=None, description="A join stage's count (`Then(..., join=...)`): "
                                   "it is queued until `remaining` is 0, then runs once with every member's outcome")


class ChainResponse(BaseModel):
    chain_id: uuid.UUID = Field(description="The id of the chain's first job")
    status: Literal["running", "succeeded", "failed", "canceled", "lost"] = Field(
        description="running while a stage is queued or running; else the last stage's end")
    stages: list[ChainStage] = Field(description="Every job of the chain, oldest first")


@router.get(
    "/chains/{chain_id}",
    response_model=ChainResponse,
    summary="A chain and its stage history",
    responses=error_responses(ErrorCode.chain_not_found, ErrorCode.validation_error),
)
async def get_chain(
    chain_id: Annotated[uuid.UUID, Path(description="The chain's id (its first job's) or any of its jobs' ids")],
    runtime: Runtime = Depends(get_runtime),
) -> Any:
    chain = await runtime.require_app().chain(chain_id)
    return chain.to_dict()
