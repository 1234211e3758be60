"""API v1 workflows (docs/workflows.md): `/api/v1/workflows` — start a run, list runs newest
first, read one with its recorded history, wait for its result, signal it, cancel it (with every run below it), restart
it from a step; cancel, restart or retry every run a search finds as a tracked bulk operation (`/bulk/{action}`).

Errors have the house's one shape (`{error, detail}`): an unknown workflow or run is a 404, a
signal or cancel for a run that has ended a 409 (`workflow_finished`), a result asked of a run that
failed a 409 (`workflow_failed`, its error in `detail`), a wait that outlasts `timeout_sec` a 504
(`workflow_timeout`; the run goes on). A body that fails validation is a 422 that writes nothing.
The rules are `dataloader.workflows.manager.WorkflowManager`'s, as in Python and the CLI.
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Body, Depends, Path, Query, Response, status
from pydantic import BaseModel, ConfigDict, Field, StrictFloat, StrictInt, field_validator

from dataloader.api.runtime import Runtime, get_runtime, require_token
from dataloader.api.v1.exceptions import error_responses
from dataloader.api.v1.models import ErrorCode
from dataloader.api.v1.operations_router import DryRunResponse, OperationResponse
from dataloader.api.v1.utils import location
from dataloader.exceptions import ValidationFailed
from dataloader.model.operation import DryRun
from dataloader.model.storable import check_storable
from dataloader.model.workflow import NAME_PATTERN, WorkflowRun
from dataloader.workflows.manager import (
    DEFAULT_LIST_LIMIT,
    MAX_IDEMPOTENCY_KEY,
    MAX_LIST_LIMIT,
    WorkflowManager,
)

router = APIRouter(prefix="/api/v1/workflows", tags=["workflows"], dependencies=[Depends(require_token)])


async def get_workflow_manager(runtime: Runtime = Depends(get_runtime)) -> WorkflowManager:
    return runtime.require_app().workflows


Api = Annotated[WorkflowManager, Depends(get_workflow_manager)]
RunId = Annotated[uuid.UUID, Path(description="The run's id (the id of the job that runs it)")]
SignalName = Annotated[str, Path(pattern=f"^{NAME_PATTERN}$", description="The signal's name")]


class StartBody(BaseModel):
    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [
        {"workflow": "orders.fulfil", "input": {"order": 7}, "idempotency_key": "order-7"}]})

    workflow: str = Field(pattern=f"^{NAME_PATTERN}$", description="A registered workflow's name")
    input: Any = Field(default=None, description="The workflow's input (any JSON)")
    idempotency_key: str | None = Field(default=None, min_length=1, max_length=MAX_IDEMPOTENCY_KEY,
                                        description="The same key for the same workflow starts one run")
    lease_ttl_sec: int | None = Field(default=None, ge=1, le=7 * 86400,
                                      description="Lease of the run's job: how soon a dead node's run resumes")
    deadline: StrictInt | StrictFloat | str | None = Field(
        default=None, examples=[3600, "12h"],
        description="How long the whole run may take from now: seconds, or 90m, 12h, 7d (1 s to ten years). "
                    "Past it the run fails and its unfinished children are canceled")

    @field_validator("input", "idempotency_key")
    @classmethod
    def _storable(cls, value: Any) -> Any:
        return check_storable(value)


class SignalBody(BaseModel):
    model_config = ConfigDict(extra="forbid")

    payload: Any = Field(default=None, description="What the waiting `wf.wait_for` returns (any JSON)")

    @field_validator("payload")
    @classmethod
    def _storable(cls, value: Any) -> Any:
        return check_storable(value)


class RestartBody(BaseModel):
    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [{"from_step": "charge"}, {}]})

    from_step: str | None = Field(default=None, min_length=1, max_length=200,
                                  description="The step to run again from (its first position); none: the start")

    @field_validator("from_step")
    @classmethod
    def _storable(cls, value: Any) -> Any:
        return check_storable(value)


class StepView(BaseModel):
    seq: int = Field(description="Its position in the run's history: 1, 2, 3… in the order the code asks")
    kind: str = Field(description="step, sleep, wait or gather")
    name: str
    state: str = Field(description="done, failed, or pending (between retries, waiting, joining)")
    result: Any = Field(default=None, description="The recorded result (any JSON)")
    error: str | None = None
    attempts: int
    wake_at: datetime | None = Field(description="A sleep's end, a wait's deadline, a retry's time")
    remaining: int | None = Field(description="A gather's children not yet ended; a step job's: 1 until it ended")
    created_at: datetime | None
    finished_at: datetime | None
    job_id: uuid.UUID | None = Field(default=None, description="A step run as a job of its own (a queue, lock_key "
                                                               "or other job options of its own): that job")
    job_queue: str | None = Field(default=None, description="The step job's queue")
    job_lock_key: str | None = Field(default=None, description="The step job's lock_key")
    job_status: str | None = Field(default=None, description="The step job's status")


class EarlierChildView(BaseModel):
    run_id: uuid.UUID
    workflow: str
    seq: int = Field(description="The gather's position in that generation's history")
    generation: int = Field(description="The parent's generation that started it")
    status: str | None = Field(description="Its job's status (null: its job was pruned)")


class RunView(BaseModel):
    run_id: uuid.UUID
    workflow: str
    status: str = Field(description="Its job's status: queued (also while it sleeps, waits or joins), running, "
                                    "succeeded, failed, canceled, lost")
    input: Any = None
    result: Any = None
    error: str | None = None
    queue: str
    parent_run_id: uuid.UUID | None
    created_at: datetime
    finished_at: datetime | None
    available_at: datetime | None = Field(description="When its job runs next (a sleeping run's wake-up)")
    deadline_at: datetime | None = Field(default=None, description="When the run must have ended (none: never)")
    generation: int = Field(default=0, description="How many times the run was restarted")
    steps: list[StepView]
    earlier_children: list[EarlierChildView] = Field(
        default_factory=list, description="Children of the generations a restart left: counted by no join since")


class RunSummaryView(BaseModel):
    run_id: uuid.UUID
    workflow: str
    status: str = Field(description="Its job's status")
    queue: str
    parent_run_id: uuid.UUID | None = Field(description="The run whose gather started it, if any")
    error: str | None = None
    attempt: int = Field(description="Attempts of its job so far")
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    available_at: datetime | None = Field(description="When its job runs next (a sleeping run's wake-up)")


class RunListView(BaseModel):
    runs: list[RunSummaryView] = Field(description="Newest first, without input, result or history")
    next_cursor: str | None = Field(description="Pass as `cursor` for the next page; null on the last")


class ResultView(BaseModel):
    run_id: uuid.UUID
    result: Any = Field(default=None, description="What the workflow returned (any JSON)")


class SignalSent(BaseModel):
    run_id: uuid.UUID
    signal: str


def view(run: WorkflowRun) -> RunView:
    return RunView.model_validate(run.to_dict())


@router.post("", status_code=status.HTTP_201_CREATED, response_model=RunView, summary="Start a workflow run",
             responses=error_responses(ErrorCode.unknown_workflow, ErrorCode.args_too_large, ErrorCode.invalid_json,
                                       ErrorCode.unsupported_media_type))
async def start_run(body: StartBody, api: Api, response: Response) -> RunView:
    """201 with the run (an idempotent repeat returns the run the key started)."""
    run_id = await api.start(body.workflow, body.input, idempotency_key=body.idempotency_key,
                             lease_ttl_sec=body.lease_ttl_sec, deadline=body.deadline)
    response.headers["Location"] = location("api", "v1", "workflows", str(run_id))
    return view(await api.get(run_id))


@router.get("", response_model=RunListView, summary="List runs, newest first",
            responses=error_responses(ErrorCode.invalid_cursor))
async def list_runs(
    api: Api,
    workflow: Annotated[str | None, Query(pattern=f"^{NAME_PATTERN}$", description="Only this workflow's runs")] = None,
    status_: Annotated[Literal["queued", "running", "succeeded", "failed", "canceled", "lost"] | None,
                       Query(alias="status", description="Only runs whose job has this status")] = None,
    limit: Annotated[int, Query(ge=1, le=MAX_LIST_LIMIT)] = DEFAULT_LIST_LIMIT,
    cursor: Annotated[str | None, Query(max_length=2000, pattern=r"^[A-Za-z0-9_\-]*$",
                                        description="next_cursor of the previous page")] = None,
) -> RunListView:
    """Runs (children too) newest first, keyset-paged: runs started meanwhile never shift a page."""
    page = await api.list(workflow=workflow, status=status_, limit=limit, cursor=cursor or None)
    return RunListView.model_validate(page.to_dict())


class BulkBody(BaseModel):
    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [
        {"filter": {"workflow": "orders.fulfil", "statuses": ["failed"], "created_from": "2030-01-01T00:00:00Z"},
         "from_step": "charge", "dry_run": True}]})

    filter: dict[str, Any] = Field(
        default_factory=dict, description="workflow, statuses (the runs' jobs'), created_from, created_to "
                                          "(RFC 3339 with a zone), top_level; empty: every run")
    from_step: str | None = Field(default=None, description="restart only: the step to run again from (none: the "
                                                            "start)")
    # strict: 0 or "false" must not mean anything here (a 0 once started a real operation)
    dry_run: bool = Field(default=False, strict=True, description="Only count the runs (by status, with a sample)")
    started_by: str = Field(default="api", min_length=1, max_length=200, pattern=r"^[^\x00]*$")
    batch_size: int | None = Field(default=None, ge=1, le=10_000, description="Runs per batch (one transaction)")


BulkAction = Annotated[Literal["cancel", "restart", "retry"], Path(
    description="cancel (each run with the runs below it), restart (from `from_step`), retry (from where it failed)")]


@router.post("/bulk/{action}", status_code=status.HTTP_201_CREATED, response_model=OperationResponse | DryRunResponse,
             summary="Cancel, restart or retry every run a search finds, as a tracked bulk operation (or a dry run)",
             responses={200: {"model": DryRunResponse, "description": "The dry run's count"},
                        201: {"model": OperationResponse, "description": "The operation"},
                        **error_responses(ErrorCode.invalid_json, ErrorCode.unsupported_media_type,
                                          ErrorCode.invalid_request, ErrorCode.too_many_queries,
                                          ErrorCode.query_timeout)})
async def bulk_runs(action: BulkAction, api: Api, response: Response,
                    body: Annotated[BulkBody | None, Body()] = None) -> Any:
    """Starts an operation of kind `workflow_<action>` (follow, pause, resume or cancel it under
    /api/v1/operations/{id}); each run is changed as the single call does, when its batch reaches
    it: a run no longer eligible then (ended, for a cancel; not ended, for a restart or retry) is
    skipped, and one whose restart is refused (no such recorded step, a gather in the way) is
    failed, named in the operation's audit trail. `from_step` is for restart only."""
    body = body or BulkBody()
    options = {"started_by": body.started_by, "dry_run": body.dry_run, "batch_size": body.batch_size}
    if action != "restart" and body.from_step is not None:
        raise ValidationFailed("from_step: only a restart takes a step (retry finds where each run failed)",
                               [{"loc": ["from_step"], "msg": "only a restart takes a step", "type": "value_error"}])
    if action == "cancel":
        result = await api.cancel_many(body.filter, **options)
    elif action == "restart":
        result = await api.restart_many(body.filter, body.from_step, **options)
    else:
        result = await api.retry_many(body.filter, **options)
    if isinstance(result, DryRun):
        response.status_code = status.HTTP_200_OK
    return result.to_dict()


@router.get("/{run_id}", response_model=RunView, summary="A run with its recorded history",
            responses=error_responses(ErrorCode.workflow_not_found))
async def get_run(run_id: RunId, api: Api) -> RunView:
    return view(await api.get(run_id))


@router.get("/{run_id}/result", response_model=ResultView, summary="Wait for a run's result",
            responses=error_responses(ErrorCode.workflow_not_found, ErrorCode.workflow_failed,
                                      ErrorCode.workflow_timeout))
async def get_result(run_id: RunId, api: Api,
                     timeout_sec: Annotated[float, Query(ge=0, le=300, description="How long to wait")] = 30.0
                     ) -> ResultView:
    """Waits for the run to end: its result; 409 `workflow_failed` if it failed, was canceled or
    lost; 504 `workflow_timeout` past `timeout_sec` (the run goes on)."""
    return ResultView(run_id=run_id, result=await api.result(run_id, timeout=timeout_sec))


class TokenBody(BaseModel):
    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [{"payload": {"approved": True}}]})

    payload: Any = Field(default=None, description="What the run's wait_for(token) returns (any JSON)")

    @field_validator("payload")
    @classmethod
    def _storable(cls, value: Any) -> Any:
        return check_storable(value)


class TokenCompleted(BaseModel):
    run_id: uuid.UUID = Field(description="The run the token belongs to")


@router.post("/tokens/{token}", status_code=status.HTTP_202_ACCEPTED, response_model=TokenCompleted,
             summary="Complete a wait token (the token is the credential: no API token needed)",
             responses=error_responses(ErrorCode.token_not_found, ErrorCode.token_used, ErrorCode.workflow_finished,
                                       ErrorCode.invalid_json, ErrorCode.unsupported_media_type))
async def complete_token(token: Annotated[str, Path(min_length=1, max_length=100, description="The wait token")],
                         api: Api, body: Annotated[TokenBody | None, Body()] = None) -> TokenCompleted:
    """For a third party handed a run's wait token (`wf.token(...)`): its payload becomes what the
    run's `wait_for(token)` returns, and a run waiting for it wakes at once. Once: 409 `token_used`
    for a second completion, 409 `workflow_finished` if the run has ended, 404 `token_not_found`
    for a token that is not one — nothing is stored then."""
    return TokenCompleted(run_id=await api.complete_token(token, body.payload if body is not None else None))


@router.post("/{run_id}/signals/{name}", status_code=status.HTTP_202_ACCEPTED, response_model=SignalSent,
             summary="Send a signal to a run",
             responses=error_responses(ErrorCode.workflow_not_found, ErrorCode.workflow_finished,
                                       ErrorCode.invalid_json, ErrorCode.unsupported_media_type))
async def signal_run(run_id: RunId, name: SignalName, api: Api,
                     body: Annotated[SignalBody | None, Body()] = None) -> SignalSent:
    """Stored until a `wf.wait_for(name)` of the run takes it (each signal answers one wait, oldest
    first); a run waiting for it wakes at once. 409 if the run has ended (nothing stored)."""
    await api.signal(run_id, name, body.payload if body is not None else None)
    return SignalSent(run_id=run_id, signal=name)


@router.post("/{run_id}/cancel", response_model=RunView, summary="Cancel a run and the runs below it",
             responses=error_responses(ErrorCode.workflow_not_found, ErrorCode.workflow_finished))
async def cancel_run(run_id: RunId, api: Api) -> RunView:
    """A sleeping, waiting or joining run ends at once, a running one at its next await; its
    children (and theirs) that have not ended are canceled too."""
    return view(await api.cancel(run_id))


@router.post("/{run_id}/restart", response_model=RunView, summary="Run an ended run again from a step",
             responses=error_responses(ErrorCode.workflow_not_found, ErrorCode.job_not_retryable,
                                       ErrorCode.invalid_json, ErrorCode.unsupported_media_type))
async def restart_run(run_id: RunId, api: Api, body: Annotated[RestartBody | None, Body()] = None) -> RunView:
    """For a failed, canceled or lost run (409 `job_not_retryable` otherwise), e.g. after a fix: its
    history from the step on is removed and it runs again from there; the steps before keep their
    results. From before a gather, the replay starts new children that join anew; the old ones that
    had not ended are canceled and count in no join (`earlier_children` lists them)."""
    return view(await api.restart(run_id, from_step=body.from_step if body is not None else None))
