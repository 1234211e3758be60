"""API v1 audit trail (docs/security.md "Audit trail"): `GET /api/v1/audit` — who changed what,
when, from where and how it ended, newest first, keyset-paged.

Its access model action is `Action.READ_AUDIT` (model/principal.py): only a principal allowed it
may read the trail (admins, and tokens with the admin scope); model/http_actions.py names it for
this route and api/access.py enforces it. The filter is `dataloader.model.audit.AuditFilter`, the one of every face:
a bad value is a 422 `validation_error` (or `invalid_cursor`) in the house's one error shape."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, Query
from pydantic import BaseModel, Field

from dataloader.api.runtime import Runtime, get_runtime, require_token
from dataloader.api.v1.exceptions import error_responses
from dataloader.api.v1.models import ErrorCode
from dataloader.model.audit import DEFAULT_AUDIT_LIMIT, MAX_AUDIT_LIMIT, AuditFilter

router = APIRouter(prefix="/api/v1/audit", tags=["audit"], dependencies=[Depends(require_token)])


class AuditEntryView(BaseModel):
    id: str
    ts: datetime
    actor: str = Field(description="The principal's label: user:alice, token:ci, cli:root, library:python")
    actor_kind: str
    address: str | None = Field(description="Where the request came from, when the face knows it")
    action: str = Field(description="What was asked: job.cancel, queue.pause, limits.set, operation.start …")
    target_kind: str | None
    target_id: str | None
    target: str | None = Field(description="kind:id, as a filter names it")
    details: dict[str, Any] = Field(description="The inputs that matter (never secrets or payloads)")
    outcome: Literal["ok", "refused"]
    error_code: str | None = Field(description="A refusal's error code (nothing was changed)")
    face: str | None = Field(description="python, http, cli or console (None: not known)")


class AuditPageView(BaseModel):
    entries: list[AuditEntryView]
    next_cursor: str | None = Field(description="Pass as `cursor` for the next (older) page; None: the last")


@router.get("", response_model=AuditPageView, summary="Search the audit trail, newest first",
            responses=error_responses(ErrorCode.invalid_cursor))
async def search_audit(
    runtime: Annotated[Runtime, Depends(get_runtime)],
    actor: Annotated[str | None, Query(description="A principal (user:alice) or a kind (user)")] = None,
    action: Annotated[str | None, Query(description="An action (job.cancel) or a family (job)")] = None,
    target: Annotated[str | None, Query(description="kind:id (job:<uuid>, queue:load) or a kind")] = None,
    outcome: Annotated[Literal["ok", "refused"] | None, Query()] = None,
    since: Annotated[str | None, Query(description="RFC 3339 with a zone, or a duration back (1h, 7d); inclusive")
                     ] = None,
    until: Annotated[str | None, Query(description="RFC 3339 with a zone, or a duration back; exclusive")] = None,
    limit: Annotated[int, Query(ge=1, le=MAX_AUDIT_LIMIT)] = DEFAULT_AUDIT_LIMIT,
    cursor: Annotated[str | None, Query(description="next_cursor of the previous page")] = None,
) -> AuditPageView:
    """Rows of the audit trail that match every filter given (requires `Action.READ_AUDIT`)."""
    f = AuditFilter.of(actor=actor, action=action, target=target, outcome=outcome, since=since, until=until,
                       limit=limit, cursor=cursor)
    page = await runtime.require_app().audit.search(f)
    return AuditPageView(entries=[AuditEntryView.model_validate(e.to_dict()) for e in page.entries],
                         next_cursor=page.next_cursor)
