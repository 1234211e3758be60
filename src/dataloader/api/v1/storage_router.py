"""API v1 route of the storage of the queue's tables (docs/observability.md "Storage"):
`GET /api/v1/storage`, the leader's newest storage sample with each table's change and hourly
trend, and what holds the xmin horizon now. A read only: the sample is the leader's duty."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from fastapi import APIRouter, Depends
from pydantic import BaseModel, Field

from dataloader.api.runtime import Runtime, get_runtime, require_token
from dataloader.api.v1.exceptions import error_responses

router = APIRouter(prefix="/api/v1", tags=["storage"], dependencies=[Depends(require_token)])


class TableStorageResponse(BaseModel):
    table: str
    heap_bytes: int = Field(description="Main fork, free space map and visibility map (partitions summed)")
    index_bytes: int
    toast_bytes: int
    total_bytes: int
    live_tuples: int
    dead_tuples: int
    last_autovacuum: datetime | None = Field(description="The latest of the table's or any partition's")
    last_autoanalyze: datetime | None
    changes: dict[str, int | None] = Field(
        description="Total bytes now minus the last sample at least 1h, 6h, 24h older (null: none that old)")
    trend: list[int] = Field(description="Total bytes in the last sample of each hour of the last day, oldest first")


class XminHolder(BaseModel):
    kind: str = Field(description="backend, prepared (a prepared transaction) or slot (a replication slot)")
    pid: int | None
    application_name: str | None = Field(description="A slot's name or a prepared transaction's gid for those")
    state: str | None
    age_sec: float
    xid_age: int


class StorageResponse(BaseModel):
    sampled_at: datetime | None = Field(description="When the newest sample was taken (null: never)")
    total_bytes: int
    tables: list[TableStorageResponse] = Field(description="Biggest first")
    oldest_xmin: XminHolder | None = Field(description="What holds the xmin horizon back longest (null: nothing)")


@router.get("/storage", response_model=StorageResponse, responses=error_responses(),
            summary="The queue's tables: sizes, growth, dead tuples, last autovacuum; the xmin holder")
async def storage(runtime: Annotated[Runtime, Depends(get_runtime)]) -> StorageResponse:
    report = await runtime.require_app().health.storage()
    return StorageResponse.model_validate(report.to_dict())
