"""API v1 queues (issue 21, flow control): list every queue's flow state and use, pause and resume
a queue. Errors have the one shape (`{error, detail}`); a queue name the job request would refuse
is a 422 `validation_error` and writes nothing. The rules are `dataloader.flow.manager.FlowManager`'s."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from fastapi import APIRouter, Depends, Query
from fastapi import Path as PathParam
from pydantic import BaseModel, Field
from starlette.convertors import Convertor, register_url_convertor

from dataloader.api.runtime import Runtime, get_runtime, require_token
from dataloader.api.v1.exceptions import error_responses
from dataloader.flow.manager import FlowManager
from dataloader.model.flow import QueueFlow


class QueueNameConvertor(Convertor[str]):
    """Any queue name a job can have, slashes and line breaks included (Starlette's `path`
    convertor is `.*`, which stops at a newline; the default one stops at a slash)."""

    regex = r"[\s\S]+"

    def convert(self, value: str) -> str:
        return value

    def to_string(self, value: str) -> str:
        return value


register_url_convertor("dl_queue", QueueNameConvertor())

router = APIRouter(prefix="/api/v1/queues", tags=["queues"], dependencies=[Depends(require_token)])


async def get_flow_manager(runtime: Runtime = Depends(get_runtime)) -> FlowManager:
    return runtime.require_app().flow


Api = Annotated[FlowManager, Depends(get_flow_manager)]
# `:dl_queue` so every name a job's queue may have (a slash, a line break) still names one queue;
# the name's rules are the manager's (one check for every face), the schema states its length.
QueueName = Annotated[str, PathParam(min_length=1, max_length=200,
                                     description="The queue's name (1 to 200 characters, as a job's `queue`)")]

# `?task=`: one task of the queue (a task name may hold any character, so not a path segment)
TaskName = Annotated[str | None, Query(min_length=1, max_length=200,
                                       description="Only this task of the queue (1 to 200 characters, as a "
                                                   "job's `task`); the queue's other tasks are not affected")]


class QueueResponse(BaseModel):
    queue: str
    paused: bool = Field(description="No job of the queue starts on any node while true; enqueue still works")
    paused_at: datetime | None = Field(description="When the current pause began (null when not paused)")
    running: int = Field(description="Jobs of the queue running now, all nodes")
    queued: int = Field(description="Jobs of the queue waiting (queued, runnable or delayed), all nodes")
    fair_share: bool = Field(False, description="Claims go round-robin (or by weight) across the jobs' "
                                                "partition keys instead of strictly by age")
    fair_weights: dict[str, float] | None = Field(None, description="partition_key -> weight under fair share "
                                                                    "(a key not named weighs 1; null: all weigh 1)")
    paused_tasks: dict[str, datetime] = Field(default_factory=dict, description="The queue's paused tasks and "
                                              "when each pause began: none of their jobs starts, the others run")


class QueueListResponse(BaseModel):
    queues: list[QueueResponse] = Field(description="Every queue that is paused or has queued or running jobs")


def _view(flow: QueueFlow) -> QueueResponse:
    return QueueResponse(queue=flow.queue, paused=flow.paused, paused_at=flow.paused_at, running=flow.running,
                         queued=flow.queued, fair_share=flow.fair_share, fair_weights=flow.fair_weights,
                         paused_tasks=flow.paused_tasks)


@router.get("", response_model=QueueListResponse, summary="Queues: paused or not, and current use",
            responses=error_responses())
async def list_queues(api: Api) -> QueueListResponse:
    """Every queue with flow state or live jobs, by name."""
    return QueueListResponse(queues=[_view(q) for q in await api.list()])


@router.post("/{queue:dl_queue}/pause", response_model=QueueResponse, summary="Pause a queue on every node",
             responses=error_responses())
async def pause_queue(queue: QueueName, api: Api, task: TaskName = None) -> QueueResponse:
    """Running jobs finish; no job of the queue (with `task`: of that task of the queue) starts on
    any node from this call's answer on, until it is resumed; enqueue still works. Durable (survives
    restarts). Idempotent."""
    return _view(await api.pause(queue, task))


@router.post("/{queue:dl_queue}/resume", response_model=QueueResponse, summary="Resume a paused queue",
             responses=error_responses())
async def resume_queue(queue: QueueName, api: Api, task: TaskName = None) -> QueueResponse:
    """Wakes the queue's workers on every node at once. Idempotent (a queue never paused is open).
    With `task`, resumes that task of the queue (a paused queue stays paused)."""
    return _view(await api.resume(queue, task))
