"""API v1 observers and nodes: create an observer by unique name (409 on a live duplicate), list
them with the node running each and its state, read one, stop one by name (confirmed: 200 once it
is `deleted`, 202 while its node is still stopping it), and the node registry with each node's
load. Errors have the jobs API's shape (`{error, detail}`); bad input is a 4xx that writes nothing.
The rules are `dataloader.observers.manager.ObserverManager`'s."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Path, Query, Response, status
from pydantic import BaseModel, ConfigDict, Field

from dataloader.api.runtime import Runtime, get_runtime, require_token
from dataloader.api.v1.exceptions import error_responses
from dataloader.api.v1.models import ErrorCode
from dataloader.api.v1.utils import location
from dataloader.exceptions import InvalidObserverRequest
from dataloader.model.observer import NAME_PATTERN, Node, Observer, ObserverSpec, ObserverState
from dataloader.model.storable import StorableFields, storable_text_problem
from dataloader.observers.manager import MAX_LIST_LIMIT, ObserverManager

router = APIRouter(prefix="/api/v1/observers", tags=["observers"], dependencies=[Depends(require_token)])
nodes_router = APIRouter(prefix="/api/v1/nodes", tags=["nodes"], dependencies=[Depends(require_token)])

MAX_STOP_WAIT_SEC = 60


async def get_observer_manager(runtime: Runtime = Depends(get_runtime)) -> ObserverManager:
    return runtime.require_app().observers


Api = Annotated[ObserverManager, Depends(get_observer_manager)]
Name = Annotated[str, Path(min_length=1, max_length=200, pattern=NAME_PATTERN, description="The observer's name")]


class ObserverCreateRequest(StorableFields, ObserverSpec):
    """The body of `POST /api/v1/observers`. Unknown fields are refused."""

    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [
        {"name": "binance:BTC-USDT", "kind": "ws.ticker", "args": {"exchange": "binance", "pair": "BTC-USDT"}},
    ]})


class ObserverResponse(BaseModel):
    name: str
    kind: str
    args: Any
    state: ObserverState = Field(description="created (waiting for a node), processing, on_deleting, deleted, "
                                             "failed (crashed more than max_restarts times in a row)")
    desired: str = Field(description="run, or stop once a stop was asked")
    node: str | None = Field(description="The node running it (null while waiting)")
    node_id: uuid.UUID | None = Field(description="That node's incarnation")
    epoch: int = Field(description="Its run's fencing token (grows on every start)")
    failures: int = Field(description="Crashes in a row (node deaths do not count)")
    max_restarts: int | None
    moves: int = Field(description="Times it moved off a node that died or stopped")
    restart_at: datetime = Field(description="When a waiting observer may start (after a crash: the backoff)")
    reason: str | None = Field(description="Why it is in its state (crashed and restarting, node died, stopped)")
    last_error: str | None
    last_error_at: datetime | None
    checkpoint: Any = Field(description="The position it saved last (ctx.save)")
    status: Any = Field(description="The state it reported last (ctx.report)")
    created_at: datetime
    updated_at: datetime
    started_at: datetime | None
    stop_requested_at: datetime | None
    stopped_at: datetime | None


class ObserverListResponse(BaseModel):
    observers: list[ObserverResponse]
    next_after: str | None = Field(description="Pass as `after` for the next page (null: the last page)")


class NodeResponse(BaseModel):
    node_id: uuid.UUID = Field(description="This incarnation (new on every start)")
    name: str = Field(description="DL_NODE_NAME: the same across restarts")
    host: str
    pid: int
    version: str
    state: str = Field(description="live, superseded (a newer incarnation started; dead once silent), dead, stopped")
    started_at: datetime
    heartbeat_at: datetime
    heartbeat_age_sec: float
    stopped_at: datetime | None
    superseded_by: uuid.UUID | None
    capacity: int = Field(description="Observers it runs at most")
    running: int = Field(description="Observers it holds now (its load)")
    queues: list[str]
    kinds: list[str] = Field(description="Observer kinds it has code for")


class NodeListResponse(BaseModel):
    nodes: list[NodeResponse]


def _view(observer: Observer) -> ObserverResponse:
    return ObserverResponse(**{k: getattr(observer, k) for k in ObserverResponse.model_fields})


def _node_view(node: Node) -> NodeResponse:
    return NodeResponse(**{k: getattr(node, k) for k in NodeResponse.model_fields})


@router.post("", status_code=status.HTTP_201_CREATED, response_model=ObserverResponse, summary="Create an observer",
             responses=error_responses(ErrorCode.invalid_json, ErrorCode.unsupported_media_type,
                                       ErrorCode.invalid_request, ErrorCode.observer_exists))
async def create_observer(body: ObserverCreateRequest, response: Response, api: Api) -> ObserverResponse:
    """It waits in `created` until a node with spare capacity takes it. 409 while an observer of
    that name exists (a `deleted` one is created afresh)."""
    observer = await api.create(ObserverSpec.model_validate(body.model_dump()))
    response.headers["Location"] = location("api", "v1", "observers", observer.name)
    return _view(observer)


@router.get("", response_model=ObserverListResponse, summary="List observers with their node and state",
            responses=error_responses(ErrorCode.invalid_request))
async def list_observers(
    api: Api,
    state: Annotated[ObserverState | None, Query()] = None,
    kind: Annotated[str | None, Query(min_length=1, max_length=200)] = None,
    node: Annotated[str | None, Query(min_length=1, max_length=200, description="Node name")] = None,
    after: Annotated[str | None, Query(min_length=1, max_length=200, description="Names after this")] = None,
    limit: Annotated[int, Query(ge=1, le=MAX_LIST_LIMIT)] = 1000,
) -> ObserverListResponse:
    for value in (kind, node, after):
        problem = storable_text_problem(value) if value is not None else None
        if problem:
            raise InvalidObserverRequest(problem)
    found = await api.list(state=state, kind=kind, node=node, after=after, limit=limit)
    return ObserverListResponse(observers=[_view(o) for o in found],
                                next_after=found[-1].name if len(found) == limit else None)


@router.get("/{name}", response_model=ObserverResponse, summary="One observer",
            responses=error_responses(ErrorCode.observer_not_found))
async def get_observer(name: Name, api: Api) -> ObserverResponse:
    return _view(await api.get(name))


@router.post("/{name}/stop", response_model=ObserverResponse, summary="Stop an observer by name",
             responses={**error_responses(ErrorCode.observer_not_found),
                        202: {"model": ObserverResponse, "description": "Still on_deleting after `wait`"}})
async def stop_observer(
    name: Name, api: Api, response: Response,
    wait: Annotated[float, Query(ge=0, le=MAX_STOP_WAIT_SEC, description="Seconds to wait for `deleted`")] = 10,
) -> ObserverResponse:
    """Cooperative: the node holding it asks it to return (an async observer that does not is
    cancelled after DL_OBSERVER_STOP_GRACE_SEC). A stop holds while it moves between nodes: it never
    starts again. 200 once `deleted`; 202 when still `on_deleting` after `wait`. Idempotent."""
    observer = await api.stop(name, wait=wait)
    if observer.state is not ObserverState.DELETED:
        response.status_code = status.HTTP_202_ACCEPTED
    return _view(observer)


@nodes_router.get("", response_model=NodeListResponse, summary="The node registry with each node's load",
                  responses=error_responses(ErrorCode.invalid_request))
async def list_nodes(
    api: Api,
    include_ended: Annotated[bool, Query(description="Also dead and stopped incarnations")] = False,
    limit: Annotated[int, Query(ge=1, le=MAX_LIST_LIMIT)] = 1000,
) -> NodeListResponse:
    return NodeListResponse(nodes=[_node_view(n) for n in await api.nodes(include_ended=include_ended, limit=limit)])
