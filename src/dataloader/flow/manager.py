"""Pause, resume and list queues — the rules behind `app.pause_queue`/`resume_queue`/`queues`,
the HTTP API (`/api/v1/queues`) and the CLI (`dataloader queues`).

A pause is a row in `dl_queue_flow` (migration 0019). It is enforced by the claim statement itself
(claim_jobs.sql reads the row in its own snapshot), so it holds on every node from the moment the
pause commits: the bound is the claim statements already executing at that instant, which may
still start the jobs they are claiming. Nothing is cached on a node, so there is nothing to go
stale across restarts or nodes. Running jobs are never touched; enqueue keeps working. A resume
NOTIFYs the queue's workers on every node, as an enqueue does.

Input: a queue name is checked as the job request checks `queue` (1 to 200 characters, not
blank, no NUL), before anything is written (promise 8): a pause of a name no job could have would
otherwise leave a row nobody can see a reason for."""

from __future__ import annotations

from typing import Any

from dataloader import metrics
from dataloader.exceptions import ValidationFailed
from dataloader.flow.fair_share import check_fair_share, check_fair_weights
from dataloader.model.flow import QUEUE_NAME_MAX, TASK_NAME_MAX, QueueFlow
from dataloader.storage.flow_repository import FlowRepository


def check_queue_name(queue: object) -> str:
    """The queue name, or ValidationFailed (the job request's rule for `queue`)."""
    problem = None
    if not isinstance(queue, str):
        problem = "must be a string"
    elif not 1 <= len(queue) <= QUEUE_NAME_MAX:
        problem = f"must be 1 to {QUEUE_NAME_MAX} characters"
    elif not queue.strip():
        problem = "must not be blank"
    elif "\x00" in queue:
        problem = "must not contain NUL characters"
    if problem is not None:
        raise ValidationFailed(f"queue: {problem}", [{"loc": ["queue"], "msg": problem, "type": "value_error"}])
    return queue  # type: ignore[return-value]


def check_task_name(task: object) -> str:
    """The task name, or ValidationFailed (the job request's rule for `task`)."""
    problem = None
    if not isinstance(task, str):
        problem = "must be a string"
    elif not 1 <= len(task) <= TASK_NAME_MAX:
        problem = f"must be 1 to {TASK_NAME_MAX} characters"
    elif not task.strip():
        problem = "must not be blank"
    elif "\x00" in task:
        problem = "must not contain NUL characters"
    if problem is not None:
        raise ValidationFailed(f"task: {problem}", [{"loc": ["task"], "msg": problem, "type": "value_error"}])
    return task  # type: ignore[return-value]


class FlowManager:
    def __init__(self, repo: FlowRepository) -> None:
        self.repo = repo

    async def pause(self, queue: str, task: str | None = None) -> QueueFlow:
        """Pause `queue` on every node: no job of it starts until it is resumed. Idempotent. With
        `task`, only that task of the queue (0025): the queue's other tasks run on."""
        check_queue_name(queue)
        if task is not None:
            return await self.repo.pause_task(queue, check_task_name(task))
        return await self.repo.pause(queue)

    async def resume(self, queue: str, task: str | None = None) -> QueueFlow:
        """Resume `queue` (or one `task` of it) and wake its workers. Idempotent (what was never
        paused is left alone). A task's resume does not resume a paused queue, nor the reverse."""
        check_queue_name(queue)
        if task is not None:
            return await self.repo.resume_task(queue, check_task_name(task))
        return await self.repo.resume(queue)

    async def set_fair_share(self, queue: str, fair_share: Any = None, fair_weights: Any = ...) -> QueueFlow:
        """Fair share of `queue` on or off (None: unchanged) and its weights (partition_key ->
        weight; `...`: unchanged, None: every key weighs 1). Everything is checked before anything
        is written; from the commit on, every claim on every node uses the new order."""
        check_queue_name(queue)
        if fair_share is not None:
            check_fair_share(fair_share)
        set_weights = fair_weights is not ...
        weights = check_fair_weights(fair_weights) if set_weights else None
        return await self.repo.set_fair_share(queue, fair_share, weights, set_weights)

    async def list(self) -> list[QueueFlow]:
        """Every queue that is paused or has queued or running jobs, with its current use."""
        return await self.repo.list()

    async def refresh_metrics(self) -> None:
        """Set dl_queue_paused and dl_task_paused from the database: 1 while paused, 0 once resumed."""
        states = await self.repo.paused_states()
        metrics.QUEUE_PAUSED.clear()
        for queue, paused in states.items():
            metrics.QUEUE_PAUSED.labels(queue).set(1 if paused else 0)
        tasks = await self.repo.paused_tasks()
        metrics.TASK_PAUSED.clear()
        for (queue, task), (paused, _) in tasks.items():
            metrics.TASK_PAUSED.labels(queue, task).set(1 if paused else 0)
