"""API v1 route of the archive (docs/patterns.md "Archival"): `GET /api/v1/archive/jobs/{job_id}`,
a pruned job's row and journal read back from DL_ARCHIVE_URL through its manifest. A read only."""

from __future__ import annotations

import uuid
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Path
from pydantic import BaseModel, Field

from dataloader.api.runtime import Runtime, get_runtime, require_token
from dataloader.api.v1.exceptions import error_responses
from dataloader.api.v1.models import ErrorCode
from dataloader.api.v1.schemas import JobEvent

router = APIRouter(prefix="/api/v1", tags=["archive"], dependencies=[Depends(require_token)])


class ArchivedJobResponse(BaseModel):
    job_id: uuid.UUID
    archived: bool = Field(description="Always true: this answer comes from the archive, not the database")
    job: dict[str, Any] | None = Field(
        description="The dl_jobs row as it was exported (every column; null when only journal rows were archived)")
    events: list[JobEvent] = Field(description="The journal, oldest first, one row per event_id")
    files: list[str] = Field(description="The archive files it was found in, relative to DL_ARCHIVE_URL")


@router.get(
    "/archive/jobs/{job_id}",
    response_model=ArchivedJobResponse,
    summary="A pruned job and its journal, read back from the archive",
    responses=error_responses(ErrorCode.job_not_found, ErrorCode.archive_not_configured,
                              ErrorCode.archive_unavailable),
)
async def archived_job(
    job_id: Annotated[uuid.UUID, Path(description="The job's id")],
    runtime: Annotated[Runtime, Depends(get_runtime)],
) -> ArchivedJobResponse:
    found = await runtime.require_app().archive.history(job_id)
    return ArchivedJobResponse(job_id=found.job_id, archived=True, job=found.job,
                               events=[JobEvent.model_validate(e.to_dict()) for e in found.events],
                               files=found.files)
