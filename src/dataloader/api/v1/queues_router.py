"""API v1 queues (flow control): list every queue's flow state, limits and use, pause and
resume a queue, change its limits (PATCH). Errors have the one shape (`{error, detail}`); a queue
name the job request would refuse is a 422 `validation_error` and writes nothing.
The rules are `dataloader.flow.manager.FlowManager`'s."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from fastapi import APIRouter, Depends, Query
from fastapi import Path as PathParam
from pydantic import BaseModel, ConfigDict, Field
from starlette.convertors import Convertor, register_url_convertor

from dataloader.api.runtime import Runtime, get_runtime, require_token
from dataloader.api.v1.exceptions import error_responses
from dataloader.api.v1.models import ErrorCode
from dataloader.flow.manager import FlowManager
from dataloader.model.flow import (
    CONCURRENCY_MAX,
    LIMIT_NAMES,
    PERIOD_MAX_SEC,
    PERIOD_MIN_SEC,
    RATE_LIMIT_MAX,
    TASK_LIMIT_NAMES,
    WEIGHT_MAX,
    WEIGHT_MIN,
    QueueFlow,
)


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


_COUNT = f"an integer from 1 to {CONCURRENCY_MAX:,}"
_RATE = f"starts, an integer from 1 to {RATE_LIMIT_MAX:,}"
_PERIOD = f"seconds, {PERIOD_MIN_SEC:g} to {PERIOD_MAX_SEC:g}; 1 when a rate is given without one"


class QueueSettingsBody(BaseModel):
    """A partial change of a queue's limits: a field left out is kept, null clears the limit."""

    model_config = ConfigDict(extra="forbid", strict=True)

    concurrency: int | None = Field(None, description=f"Jobs of the queue running at once on all nodes ({_COUNT})")
    partition_concurrency: int | None = Field(
        None, description=f"Jobs running at once per partition_key, all nodes ({_COUNT}; 1 = one at a time)")
    rate_limit: int | None = Field(None, description=f"Job starts per rate_period_sec, all nodes ({_RATE})")
    rate_period_sec: float | None = Field(None, description=f"The period rate_limit counts over ({_PERIOD})")
    partition_rate_limit: int | None = Field(
        None, description=f"Job starts per partition_rate_period_sec per partition_key ({_RATE})")
    partition_rate_period_sec: float | None = Field(
        None, description=f"The period partition_rate_limit counts over ({_PERIOD})")
    fair_share: bool | None = Field(
        None, description="Claims go round-robin (or by weight) across the jobs' partition keys instead of "
                          "strictly by age (null: off)")
    fair_weights: dict[str, float] | None = Field(
        None, description=f"partition_key -> weight under fair share, each in [{WEIGHT_MIN:g}, {WEIGHT_MAX:g}]; "
                          "a key not named weighs 1 (null: every key does)")


class TaskSettingsBody(BaseModel):
    """A partial change of one task's limits in a queue: a field left out is kept, null clears it.
    A queue's keys and ranges; partition limits and fair share are the queue's alone."""

    model_config = ConfigDict(extra="forbid", strict=True)

    concurrency: int | None = Field(None, description=f"Jobs of the task running at once in the queue, all nodes "
                                                      f"({_COUNT})")
    rate_limit: int | None = Field(None, description=f"Starts of the task per rate_period_sec, all nodes ({_RATE})")
    rate_period_sec: float | None = Field(None, description=f"The period rate_limit counts over ({_PERIOD})")


class TaskLimitsResponse(BaseModel):
    concurrency: int | None = Field(description="At most this many jobs of the task running at once (null: none)")
    rate_limit: int | None = Field(description="At most this many starts of the task per rate_period_sec")
    rate_period_sec: float | None = Field(description="The task's rate limit's period in seconds")
    settings_source: str | None = Field(
        description="Who set them last: runtime (PATCH, CLI, Python; wins) or declared (@pipeline(limits=...) at "
                    "a node's start)")
    running: int = Field(description="Jobs of the task in the queue running now, all nodes")
    runnable: int = Field(description="Jobs of the task in the queue that could start now (due, not parked)")
    starts: int = Field(description="Starts of the task in its rate's window now (0 without a rate)")
    held_back: dict[str, int] = Field(
        description=f"Runnable jobs of the task each of its limits holds back now ({', '.join(TASK_LIMIT_NAMES)})")


class QueueResponse(BaseModel):
    queue: str
    paused: bool = Field(description="No job of the queue starts on any node while true; enqueue still works")
    paused_at: datetime | None = Field(description="When the current pause began (null when not paused)")
    running: int = Field(description="Jobs of the queue running now, all nodes")
    queued: int = Field(description="Jobs of the queue waiting (queued, runnable or delayed), all nodes")
    concurrency: int | None = Field(description="At most this many jobs running at once on all nodes (null: no limit)")
    partition_concurrency: int | None = Field(description="At most this many running per partition_key (null: none)")
    rate_limit: int | None = Field(description="At most this many starts per rate_period_sec (null: no limit)")
    rate_period_sec: float | None = Field(description="The rate limit's period in seconds")
    partition_rate_limit: int | None = Field(description="At most this many starts per period per partition_key")
    partition_rate_period_sec: float | None = Field(description="The partition rate limit's period in seconds")
    settings_source: str | None = Field(
        description="Who set the limits last: runtime (PATCH, CLI, Python; wins) or declared (code, "
                    "DL_QUEUES_JSON at a node's start); null when never set")
    fair_share: bool = Field(description="Claims go round-robin (or by weight) across the jobs' partition keys")
    fair_weights: dict[str, float] | None = Field(description="partition_key -> weight under fair share "
                                                              "(a key not named weighs 1; null: every key does)")
    paused_tasks: dict[str, datetime] = Field(description="The queue's paused tasks and when each pause began: "
                                                          "none of their jobs starts, the queue's other tasks run")
    desired_workers: int | None = Field(description="The autoscaling signal: job slots the queue wants on all "
                                                    "nodes now (see GET /api/v1/queues/{queue}/scaling)")
    held_back: dict[str, int] = Field(
        description=f"Runnable jobs each limit holds back now, by limit ({', '.join(LIMIT_NAMES)})")
    tasks: dict[str, TaskLimitsResponse] = Field(
        description="The queue's tasks with limits of their own (PATCH /api/v1/queues/{queue}/tasks/{task}), "
                    "with their use")


class QueueListResponse(BaseModel):
    queues: list[QueueResponse] = Field(description="Every queue that is paused or has queued or running jobs")


def _view(flow: QueueFlow) -> QueueResponse:
    return QueueResponse.model_validate({**flow.to_dict(), "paused_at": flow.paused_at,
                                         "paused_tasks": flow.paused_tasks})


@router.get("", response_model=QueueListResponse, summary="Queues: paused or not, and current use",
            responses=error_responses())
async def list_queues(api: Api) -> QueueListResponse:
    """Every queue with flow state (paused, limits) or live jobs, by name."""
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


class ScalingResponse(BaseModel):
    queue: str
    desired_workers: int = Field(description="Job slots the queue wants on all nodes now: divide by one node's "
                                             "concurrency for a replica count (KEDA does, with a prometheus trigger)")
    reason: str = Field(description="The rule that decided (docs/flow-control.md \"Autoscaling\")")
    runnable: int = Field(description="Queued jobs that could start now (due, not parked behind a running key)")
    running: int = Field(description="Jobs of the queue running now, all nodes")
    oldest_age_sec: float = Field(description="How long the oldest runnable job has been waiting")
    throughput_per_sec: float = Field(description="Jobs of the queue finished per second over the last minute")
    paused: bool = Field(description="A paused queue wants only the slots of what still runs")
    concurrency: int | None = Field(description="The queue's global concurrency limit: the cap (null: none)")
    target_sec: float = Field(description="The backlog is to be drained within this many seconds")


@router.get("/{queue:dl_queue}/scaling", response_model=ScalingResponse,
            summary="The autoscaling signal of a queue: how many job slots it wants", responses=error_responses())
async def queue_scaling(queue: QueueName, api: Api,
                        target_sec: Annotated[float, Query(ge=1, le=86400, description="Drain the backlog within "
                                                           "this many seconds")] = 60.0) -> ScalingResponse:
    """Computed from the database on every call, so every node answers the same."""
    return ScalingResponse.model_validate((await api.scaling(queue, target_sec))[0].to_dict())


# Before the queue's PATCH: a queue name may hold slashes, so `/{queue}` would also match a task's
# path. The queue's name is the longest that leaves `/tasks/{task}` (a queue named with "/tasks/"
# in it has its own limits changed through the CLI or Python).
@router.patch("/{queue:dl_queue}/tasks/{task:dl_queue}", response_model=QueueResponse,
              summary="Change one task's limits in a queue on every node",
              responses=error_responses(ErrorCode.invalid_json, ErrorCode.unsupported_media_type))
async def configure_task(queue: QueueName, task: Annotated[str, PathParam(
        min_length=1, max_length=200, description="The task's name (1 to 200 characters, as a job's `task`)")],
        body: TaskSettingsBody, api: Api) -> QueueResponse:
    """A partial update of the task's limits in the queue (a field left out is kept, null clears it;
    an unknown field or a value out of range is a 422 and changes nothing). Stored as a runtime
    setting, which wins over `@pipeline(limits=...)`, and holds for every claim on every node from
    this call's answer on. Wakes the queue's workers. The answer is the queue's state; `tasks`
    holds the task's limits while it has any."""
    return _view(await api.configure_task(queue, task, body.model_dump(exclude_unset=True)))


@router.patch("/{queue:dl_queue}", response_model=QueueResponse, summary="Change a queue's limits on every node",
              responses=error_responses(ErrorCode.invalid_json, ErrorCode.unsupported_media_type))
async def configure_queue(queue: QueueName, body: QueueSettingsBody, api: Api) -> QueueResponse:
    """A partial update of the queue's limits (a field left out is kept, null clears it; an unknown
    field or a value out of range is a 422 and changes nothing). Stored as a runtime setting, which
    wins over limits declared in code or DL_QUEUES_JSON, and holds for every claim on every node
    from this call's answer on. Wakes the queue's workers."""
    return _view(await api.configure(queue, body.model_dump(exclude_unset=True)))
