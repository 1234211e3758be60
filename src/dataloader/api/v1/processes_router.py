"""API v1 processes (docs/processes.md): `/api/v1/processes/{ns}/...` — init, call,
repair, simple repair, get (a page of history in either direction), list, remove.

Errors have the jobs API's shape (`{error, detail}`): an unknown namespace or process is a 404, a
call to a process in the wrong status a 409 naming it, a processor error a 422
(`process_task_failed`, its text in `detail`), a task that outlasts the caller's wait a 504
(`process_timeout`; the task goes on). A body that fails validation is a 422 that writes nothing.
The rules are `dataloader.processes.manager.ProcessManager`'s.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator
from datetime import datetime
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Body, Depends, Header, Path, Query, Response, status
from fastapi.responses import StreamingResponse
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, field_validator

from dataloader.api.runtime import Runtime, get_runtime, require_token
from dataloader.api.v1.exceptions import error_responses
from dataloader.api.v1.models import ErrorCode
from dataloader.api.v1.schemas import Rfc3339Time
from dataloader.api.v1.utils import location, one_segment
from dataloader.exceptions import InvalidProcessRequest
from dataloader.logger.context_vars import request_id_var
from dataloader.model.operation import DryRun
from dataloader.model.process import MAX_EVENT_ID, NS_PATTERN, HistoryRange, Process, SetTimer
from dataloader.model.storable import check_storable, storable_text_problem
from dataloader.processes.consistency import MAX_CHECK_LIMIT
from dataloader.processes.manager import MAX_LIST_LIMIT, MAX_TIMEOUT_SEC, MIN_TIMEOUT_SEC, ProcessManager

router = APIRouter(prefix="/api/v1/processes", tags=["processes"], dependencies=[Depends(require_token)])


async def get_process_manager(runtime: Runtime = Depends(get_runtime)) -> ProcessManager:
    return runtime.require_app().processes


Api = Annotated[ProcessManager, Depends(get_process_manager)]
# A path parameter is one segment: '/' and '%' in it are sent percent-encoded (`a%2Fb`), as clients
# encode path parameters, and decoded here (OneSegmentPaths in api/middleware.py routes on them).
Ns = Annotated[str, BeforeValidator(one_segment),
               Path(pattern=NS_PATTERN, description="The namespace (its processor's name)")]
Id = Annotated[str, BeforeValidator(one_segment), Path(
    min_length=1, max_length=200, pattern=r"^[^\x00]+$",
    description="The process id, any text: percent-encode it as one path segment ('/' as %2F, '%' as %25)")]
MAX_SEC_TEXT = "End the stream after this many seconds (reconnect with Last-Event-ID)"
OFFSET_TEXT = "Event id to start after (forward) or before (backward); 0: from the first / from the newest"
TASK_ERRORS = (ErrorCode.unknown_namespace, ErrorCode.process_not_found, ErrorCode.process_task_failed,
               ErrorCode.process_timeout, ErrorCode.queue_paused, ErrorCode.idempotency_conflict,
               ErrorCode.args_too_large)


class RangeBody(BaseModel):
    model_config = ConfigDict(extra="forbid")

    offset: int = Field(default=0, ge=0, le=MAX_EVENT_ID, description=OFFSET_TEXT)
    limit: int | None = Field(default=None, ge=1, le=100_000)
    direction: Literal["forward", "backward"] = "forward"


class TaskBody(BaseModel):
    model_config = ConfigDict(extra="forbid")

    args: Any = Field(default=None, description="The task's args (any JSON)")
    idempotency_key: str | None = Field(default=None, min_length=1, max_length=512)
    timeout_sec: float | None = Field(
        default=None, ge=MIN_TIMEOUT_SEC, le=MAX_TIMEOUT_SEC,
        description="How long to wait for the task (default 30 s); past it a 504, the task goes on")

    @field_validator("args", "idempotency_key")
    @classmethod
    def _storable(cls, value: Any) -> Any:
        return check_storable(value)


class InitBody(TaskBody):
    id: str = Field(min_length=1, max_length=200, description="The new process's id (unique in the namespace)")

    @field_validator("id")
    @classmethod
    def _id(cls, value: str) -> str:
        problem = storable_text_problem(value)
        if problem or not value.strip():
            raise ValueError(problem or "must not be blank")
        return value


class CallBody(TaskBody):
    range: RangeBody | None = Field(default=None, description="The part of the history the processor receives")


class TaskResponse(BaseModel):
    ns: str
    id: str
    response: Any = Field(description="What the processor returned for the caller")


class EventView(BaseModel):
    event_id: int
    timestamp: datetime
    payload: Any
    metadata: Any
    task_id: str | None


class TimerView(BaseModel):
    type: str = Field(description="timeout or remove")
    at: datetime
    task_id: str | None


class ProcessView(BaseModel):
    ns: str
    id: str
    status: str = Field(description="init, running or error")
    detail: str | None
    aux_state: Any = Field(description="JSON, or {\"$bytes\": base64} when the processor keeps bytes")
    metadata: Any
    corrupted_by: str | None = Field(description="The task that put the process in error")
    previous_status: str | None
    status_changed_at: datetime
    created_at: datetime
    last_event_id: int
    timer: TimerView | None = Field(description="The armed timer")
    history: list[EventView] = Field(description="The page of history asked for")


class ProcessListView(BaseModel):
    processes: list[ProcessView] = Field(description="Without history")
    next_cursor: str | None


def view(process: Process) -> ProcessView:
    return ProcessView(**process.to_dict())


@router.post("/{ns}", status_code=status.HTTP_201_CREATED, response_model=TaskResponse,
             summary="Create a process and run its init",
             responses=error_responses(*TASK_ERRORS, ErrorCode.process_exists, ErrorCode.invalid_json,
                                       ErrorCode.unsupported_media_type, ErrorCode.invalid_request))
async def init_process(ns: Ns, body: InitBody, api: Api, response: Response) -> TaskResponse:
    """Creates the process and waits for the processor's `init`; returns its response. 409 when the
    id exists (unless the same idempotency key: then the stored response)."""
    where = location("api", "v1", "processes", ns, body.id)  # before the create: nothing may fail after it
    result = await api.init(ns, body.id, body.args, idempotency_key=body.idempotency_key, timeout=body.timeout_sec,
                            request_id=request_id_var.get())
    response.headers["Location"] = where
    return TaskResponse(ns=ns, id=body.id, response=result)


@router.post("/{ns}/{id}/call", response_model=TaskResponse, summary="Call a running process",
             responses=error_responses(*TASK_ERRORS, ErrorCode.process_wrong_status, ErrorCode.invalid_json,
                                       ErrorCode.unsupported_media_type, ErrorCode.invalid_request))
async def call_process(ns: Ns, id: Id, body: CallBody, api: Api) -> TaskResponse:
    """Waits behind a running task of the process if there is one; 409 (naming the status) unless
    the process is running."""
    result = await api.call(ns, id, body.args, idempotency_key=body.idempotency_key,
                            range=body.range.model_dump() if body.range else None, timeout=body.timeout_sec,
                            request_id=request_id_var.get())
    return TaskResponse(ns=ns, id=id, response=result)


@router.post("/{ns}/{id}/repair", response_model=TaskResponse, summary="Repair a process in error",
             responses=error_responses(*TASK_ERRORS, ErrorCode.process_wrong_status, ErrorCode.invalid_json,
                                       ErrorCode.unsupported_media_type, ErrorCode.invalid_request))
async def repair_process(ns: Ns, id: Id, body: TaskBody, api: Api) -> TaskResponse:
    """Runs the processor with `repair`; on success the process is running again."""
    result = await api.repair(ns, id, body.args, idempotency_key=body.idempotency_key, timeout=body.timeout_sec,
                              request_id=request_id_var.get())
    return TaskResponse(ns=ns, id=id, response=result)


@router.post("/{ns}/{id}/simple-repair", response_model=ProcessView, summary="Clear a process's error",
             responses=error_responses(ErrorCode.unknown_namespace, ErrorCode.process_not_found,
                                       ErrorCode.process_wrong_status))
async def simple_repair_process(ns: Ns, id: Id, api: Api) -> ProcessView:
    """No processor call: running again, the timer that broke it (or that its failure disarmed)
    scheduled again. Returns the process with its last event."""
    return view(await api.simple_repair(ns, id))


# --- recovery (docs/operations.md "A bad deploy broke processes") ---------------------

RESTART_ERRORS = (ErrorCode.process_not_found, ErrorCode.process_busy,
                  ErrorCode.restart_not_possible, ErrorCode.invalid_json, ErrorCode.unsupported_media_type,
                  ErrorCode.invalid_request)


class RestartBody(BaseModel):
    """Where to go back to: exactly one of `from`, `from_task`, `from_event`."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True, json_schema_extra={"examples": [
        {"from": "error"}, {"from": "start"}, {"from_event": 12}]})

    from_: Literal["start", "error"] | None = Field(
        default=None, alias="from", description="start: its first init; error: the task that broke it")
    from_task: uuid.UUID | None = Field(default=None, description="A task of the process (see its trace)")
    from_event: int | None = Field(default=None, ge=1, le=MAX_EVENT_ID, description="The task that wrote this event")


class RestartResponse(BaseModel):
    ns: str
    id: str
    from_task: str = Field(description="The task it went back to")
    from_type: str
    status: str = Field(description="The process's status now (the one that task found)")
    removed_events: int = Field(description="Events written since that task, deleted")
    queued_tasks: list[str] = Field(description="The task and the later calls, queued again in the order they ran")
    timer: dict[str, Any] | None = Field(description="The timer restored ({type, at, armed}), if any")


class RestartManyBody(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True, json_schema_extra={"examples": [
        {"filter": {"statuses": ["error"], "detail": "*KeyError*"}, "from": "error", "dry_run": True}]})

    filter: dict[str, Any] = Field(default_factory=dict,
                                   description="statuses, ids, detail (a * ? pattern over the error); ns is the path's")
    from_: Literal["start", "error"] | None = Field(default=None, alias="from")
    from_event: int | None = Field(default=None, ge=1, le=MAX_EVENT_ID)
    # strict: 0 or "false" must not mean anything here (a 0 once started a real operation)
    dry_run: bool = Field(default=False, strict=True, description="Only count the processes it would examine")
    started_by: str = Field(default="api", min_length=1, max_length=200, pattern=r"^[^\x00]*$")
    batch_size: int | None = Field(default=None, ge=1, le=10_000)


class CheckBody(BaseModel):
    model_config = ConfigDict(extra="forbid")

    repair: bool = Field(default=False, strict=True, description="Repair what can be repaired (else only report)")
    cursor: str | None = Field(default=None, max_length=2000, pattern=r"^[A-Za-z0-9_\-]*$",
                               description="next_cursor of the previous page")
    limit: int = Field(default=500, ge=1, le=MAX_CHECK_LIMIT, description="Processes examined in this page")


class FindingView(BaseModel):
    process_id: str
    kind: str = Field(description="orphan_task, lost_timer, stuck_init, history_ahead, history_missing, "
                                  "cause_unknown, idle")
    detail: str
    task_id: str | None
    repairable: bool
    repaired: bool


class CheckResponse(BaseModel):
    findings: list[FindingView]
    examined: int = Field(description="Processes examined in this page")
    next_cursor: str | None


@router.post("/{ns}/{id}/restart", response_model=RestartResponse, summary="Restart a process from a step",
             responses=error_responses(*RESTART_ERRORS))
async def restart_process(ns: Ns, id: Id, body: RestartBody, api: Api) -> Any:
    """Puts the process back to the state the chosen task found, deletes the events written since,
    and queues that task and the calls that finished after it again, in order (a timeout task is
    re-run by its restored timer). Does not wait for them: read the trace. 409 `process_busy` while
    a task of it runs or waits."""
    result = await api.restart(ns, id, body.from_, task_id=body.from_task, event_id=body.from_event)
    return result.to_dict()


@router.post("/{ns}/restart", status_code=status.HTTP_201_CREATED, response_model=None,
             summary="Restart every matching process, as a tracked bulk operation (or a dry run)",
             responses={200: {"description": "The dry run's count"}, 201: {"description": "The operation"},
                        **error_responses(ErrorCode.invalid_json, ErrorCode.unsupported_media_type,
                                          ErrorCode.invalid_request, ErrorCode.too_many_queries,
                                          ErrorCode.query_timeout)})
async def restart_processes(ns: Ns, body: RestartManyBody, api: Api, response: Response) -> Any:
    """Starts an operation of kind `process_restart` (follow, pause, resume or cancel it under
    /api/v1/operations/{id}); each process is restarted as the single restart does, and one that
    cannot be (busy, nothing to go back to) is skipped and named in the operation's audit trail."""
    if "ns" in body.filter and body.filter["ns"] != ns:
        raise InvalidProcessRequest("the filter's ns must be the path's (or left out)")
    result = await api.restart_many({**body.filter, "ns": ns}, body.from_, event_id=body.from_event,
                                    started_by=body.started_by, dry_run=body.dry_run, batch_size=body.batch_size)
    if isinstance(result, DryRun):
        response.status_code = status.HTTP_200_OK
    return result.to_dict()


@router.post("/{ns}/check", response_model=CheckResponse, summary="Consistency check of a namespace (a page)",
             responses=error_responses(ErrorCode.invalid_cursor, ErrorCode.invalid_json,
                                       ErrorCode.unsupported_media_type, ErrorCode.invalid_request))
async def check_processes(ns: Ns, api: Api, body: Annotated[CheckBody | None, Body()] = None) -> Any:
    """Finds processes whose state and tasks disagree, and idle ones (DL_PROCESS_IDLE_SEC), a page
    at a time in id order; with `repair`, repairs what can be (each under the process's lock)."""
    body = body or CheckBody()
    return (await api.check(ns, repair=body.repair, cursor=body.cursor, limit=body.limit)).to_dict()


@router.get("/{ns}", response_model=ProcessListView, summary="List processes of a namespace",
            responses=error_responses(ErrorCode.invalid_cursor, ErrorCode.invalid_request))
async def list_processes(
    ns: Ns,
    api: Api,
    status_: Annotated[Literal["init", "running", "error"] | None, Query(alias="status")] = None,
    cursor: Annotated[str | None, Query(max_length=2000, pattern=r"^[A-Za-z0-9_\-]*$")] = None,
    limit: Annotated[int, Query(ge=1, le=MAX_LIST_LIMIT)] = 100,
) -> ProcessListView:
    page = await api.list(ns, status=status_, cursor=cursor, limit=limit)
    return ProcessListView(processes=[view(p) for p in page.processes], next_cursor=page.next_cursor)


class PutEvent(BaseModel):
    model_config = ConfigDict(extra="forbid")

    event_id: int | None = Field(default=None, ge=1, le=MAX_EVENT_ID)
    timestamp: Rfc3339Time | None = None
    payload: Any
    metadata: Any = None

    @field_validator("payload", "metadata")
    @classmethod
    def _json(cls, value: Any) -> Any:
        return check_storable(value)


class PutTimer(BaseModel):
    model_config = ConfigDict(extra="forbid")

    type: Literal["timeout", "remove"] = "timeout"
    at: Rfc3339Time


class FeedItemView(BaseModel):
    cursor: str = Field(description="Resume after this item by passing it as `after`")
    ns: str
    process_id: str
    kind: str = Field(description="event, init, repair, error, remove or import")
    event_id: int | None
    task_id: str | None
    timestamp: datetime
    payload: Any
    metadata: Any


class FeedPageView(BaseModel):
    items: list[FeedItemView]
    cursor: str = Field(description="Where the next read starts (the given cursor when nothing new was served)")


Cursor = Annotated[str | None, Query(max_length=45, pattern=r"^\d{1,20}\.\d{1,19}$",
                                     description="A cursor this feed returned; absent or 0.0: from the start")]


@router.get("/{ns}/events", response_model=FeedPageView, summary="A page of the namespace's event feed",
            responses=error_responses(ErrorCode.unknown_namespace, ErrorCode.invalid_cursor))
async def read_feed(ns: Ns, api: Api, after: Cursor = None,
                    limit: Annotated[int, Query(ge=1, le=1000)] = 100) -> FeedPageView:
    """Every event and lifecycle change (init, repair, error, remove, import) of the namespace's
    processes, in a stable order, each exactly once: a row is served once it committed and every
    older transaction ended, so a cursor never skips a late commit and never shows a rollback."""
    api.require_namespace(ns)
    page = await api.feed(ns, after=after, limit=limit)
    return FeedPageView(**page.to_dict())


@router.get("/{ns}/events/stream", summary="The namespace's event feed as Server-Sent Events",
            response_class=StreamingResponse,
            responses={200: {"content": {"text/event-stream": {}}, "description": "SSE: id = cursor, event = kind"},
                       **error_responses(ErrorCode.unknown_namespace, ErrorCode.invalid_cursor)})
async def stream_feed(
    ns: Ns,
    api: Api,
    after: Cursor = None,
    last_event_id: Annotated[str | None, Header(max_length=45, pattern=r"^\d{1,20}\.\d{1,19}$")] = None,
    max_sec: Annotated[float, Query(gt=0, le=3600, description=MAX_SEC_TEXT)] = 300,
) -> StreamingResponse:
    """Follows the feed from `after` (or the Last-Event-ID header) as it grows: each item is an
    SSE message whose `id` is its cursor, `event` its kind and `data` the item as JSON."""
    api.require_namespace(ns)
    start = last_event_id or after
    api.check_cursor(start)

    async def messages() -> AsyncIterator[bytes]:
        stop = asyncio.Event()
        timer = asyncio.get_running_loop().call_later(max_sec, stop.set)
        try:
            yield b": following\n\n"
            async for item in api.follow(ns, after=start, stop=stop):
                body = json.dumps(item.to_dict(), default=str, ensure_ascii=False)
                yield f"id: {item.cursor}\nevent: {item.kind}\ndata: {body}\n\n".encode()
        finally:
            timer.cancel()

    return StreamingResponse(messages(), media_type="text/event-stream",
                             headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})


class PutBody(BaseModel):
    model_config = ConfigDict(extra="forbid")

    status: Literal["init", "running", "error"] = "running"
    detail: str | None = Field(default=None, max_length=4000)
    aux_state: Any = None
    metadata: Any = None
    history: list[PutEvent] = Field(default_factory=list, max_length=100_000)
    timer: PutTimer | None = Field(default=None, description="Arm the process's timer (running processes only)")

    @field_validator("aux_state", "metadata")
    @classmethod
    def _json(cls, value: Any) -> Any:
        return check_storable(value)


@router.put("/{ns}/{id}", status_code=status.HTTP_201_CREATED, response_model=ProcessView,
            summary="Import a whole process with its history",
            responses=error_responses(ErrorCode.unknown_namespace, ErrorCode.process_exists, ErrorCode.invalid_json,
                                      ErrorCode.unsupported_media_type, ErrorCode.invalid_request))
async def put_process(ns: Ns, id: Id, body: PutBody, api: Api) -> ProcessView:
    """Migration from another system: the process, its events (ids default to 1, 2, 3…) and
    optionally its timer. 409 when the id exists. Returns it with its last event."""
    action = None
    if body.timer is not None:
        action = SetTimer(at=body.timer.at, remove=body.timer.type == "remove")
    process = body.model_dump(exclude={"timer"})
    process["history"] = [e.model_dump(exclude_none=True) for e in body.history]
    return view(await api.put(ns, {"id": id, **process}, action))


@router.get("/{ns}/{id}", response_model=ProcessView, summary="A process with a page of its history",
            responses=error_responses(ErrorCode.process_not_found))
async def get_process(
    ns: Ns,
    id: Id,
    api: Api,
    offset: Annotated[int, Query(ge=0, le=MAX_EVENT_ID, description=OFFSET_TEXT)] = 0,
    limit: Annotated[int | None, Query(ge=1, le=100_000)] = None,
    direction: Literal["forward", "backward"] = "forward",
) -> ProcessView:
    return view(await api.get(ns, id, HistoryRange(offset=offset, limit=limit, direction=direction)))


@router.delete("/{ns}/{id}", status_code=status.HTTP_204_NO_CONTENT, summary="Remove a process and all its rows",
               responses=error_responses(ErrorCode.process_not_found))
async def remove_process(ns: Ns, id: Id, api: Api) -> Response:
    await api.remove(ns, id)
    return Response(status_code=status.HTTP_204_NO_CONTENT)


@router.get("/{ns}/{id}/trace", summary="Every task of a process with the events it produced",
            responses=error_responses(ErrorCode.process_not_found))
async def trace_process(ns: Ns, id: Id, api: Api) -> dict[str, Any]:
    """Tasks oldest first: type, args, status (waiting, finished, error, cancelled), times,
    attempts, idempotency key, response, error, and `events`."""
    return {"ns": ns, "id": id, "tasks": [entry.to_dict() for entry in await api.trace(ns, id)]}
