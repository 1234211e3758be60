"""Pause, resume, limit and list queues — the rules behind `app.pause_queue`/`resume_queue`/
`configure_queue`/`queues`, the HTTP API (`/api/v1/queues`) and the CLI (`dataloader queues`).

A pause is a row in `dl_queue_flow` (migration 0019). It is enforced by the claim statement itself,
and a pause waits for the claims in flight (the claim fence, 0029: every claim holds the queue's
fence in share mode until it commits and reads the pause after taking it; the pause statement takes
it exclusively), so when the pause returns nothing of the queue starts on any node any more.
Nothing is cached on a node, so there is nothing to go stale across restarts or nodes. Running jobs
are never touched; enqueue keeps working. A resume NOTIFYs the queue's workers on every node, as an
enqueue does.

Input: a queue name is checked as the job request checks `queue` (1 to 200 characters, not
blank, no NUL), before anything is written (promise 8): a pause of a name no job could have would
otherwise leave a row nobody can see a reason for. Limits are checked by model/flow.py's one table
(`check_changes`, `QueueSettings.merged`) before anything is written.

Limits (0022) live on the same row and are read by the same claim, so a change holds for every
claim that starts after it committed (the gate, which locks the row, reads it as committed). Who
wins: a change made at run time (`configure`) is stored as 'runtime' and persists; limits declared
in code or settings (`Queue(limits=...)`, DL_QUEUES_JSON) are applied by `apply_declared` when a
node starts, only to a queue whose limits were not set at run time."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from dataloader import metrics
from dataloader.exceptions import ValidationFailed
from dataloader.flow.scaling import DEFAULT_TARGET_SEC, desired_workers
from dataloader.model.flow import (
    QUEUE_NAME_MAX,
    TASK_NAME_MAX,
    QueueFlow,
    QueueScaling,
    QueueSettings,
    TaskSettings,
    check_changes,
    check_task_changes,
)
from dataloader.storage.audit_repository import audited
from dataloader.storage.flow_repository import FlowRepository


def _check_name(field: str, value: object, max_length: int) -> str:
    """A queue's or task's name, or ValidationFailed (the job request's rule for that field)."""
    problem = None
    if not isinstance(value, str):
        problem = "must be a string"
    elif not 1 <= len(value) <= max_length:
        problem = f"must be 1 to {max_length} characters"
    elif not value.strip():
        problem = "must not be blank"
    elif "\x00" in value:
        problem = "must not contain NUL characters"
    if problem is not None:
        raise ValidationFailed(f"{field}: {problem}", [{"loc": [field], "msg": problem, "type": "value_error"}])
    return value  # type: ignore[return-value]


def check_queue_name(queue: object) -> str:
    """The queue name, or ValidationFailed (the job request's rule for `queue`)."""
    return _check_name("queue", queue, QUEUE_NAME_MAX)


def check_task_name(task: object) -> str:
    """The task name, or ValidationFailed (the job request's rule for `task`)."""
    return _check_name("task", task, TASK_NAME_MAX)


# Finishes counted for the throughput (a minute: long enough to smooth a burst, short enough to
# follow a change of load within a KEDA polling interval or two).
SCALING_WINDOW_SEC = 60.0
TARGET_MAX_SEC = 86_400.0


class FlowManager:
    def __init__(self, repo: FlowRepository) -> None:
        self.repo = repo

    async def pause(self, queue: str, task: str | None = None) -> QueueFlow:
        """Pause `queue` on every node: no job of it starts until it is resumed. Idempotent. With
        `task`, only that task of the queue (0025): the queue's other tasks run on."""
        check_queue_name(queue)
        if task is not None:
            task = check_task_name(task)
            async with audited(self.repo, "task.pause", "queue", queue, {"task": task}) as change:
                return await change.repo.pause_task(queue, task)
        async with audited(self.repo, "queue.pause", "queue", queue) as change:
            return await change.repo.pause(queue)

    async def resume(self, queue: str, task: str | None = None) -> QueueFlow:
        """Resume `queue` (or one `task` of it) and wake its workers. Idempotent (what was never
        paused is left alone). A task's resume does not resume a paused queue, nor the reverse."""
        check_queue_name(queue)
        if task is not None:
            task = check_task_name(task)
            async with audited(self.repo, "task.resume", "queue", queue, {"task": task}) as change:
                return await change.repo.resume_task(queue, task)
        async with audited(self.repo, "queue.resume", "queue", queue) as change:
            return await change.repo.resume(queue)

    async def configure(self, queue: str, changes: Mapping[str, Any]) -> QueueFlow:
        """Change `queue`'s limits on every node: a partial update (a setting not named is kept; None
        clears it), checked before anything is written, stored as a runtime setting (it wins over
        declarations at a node's start). Wakes the queue's workers. Returns the queue's state."""
        queue = check_queue_name(queue)
        checked = check_changes(changes)
        async with audited(self.repo, "limits.set", "queue", queue, {"changes": dict(checked)}) as change:
            return await change.repo.configure(queue, lambda current: current.merged(checked))

    async def configure_task(self, queue: str, task: str, changes: Mapping[str, Any]) -> QueueFlow:
        """Change the limits of `task` in `queue` on every node (0027): `concurrency`, `rate_limit`
        with `rate_period_sec`; a partial update checked as a queue's (None clears), stored as a
        runtime setting (it wins over `@pipeline(limits=...)`). Wakes the queue's workers. Returns
        the queue's state (its `task_limits` show the task's)."""
        queue, task = check_queue_name(queue), check_task_name(task)
        checked = check_task_changes(changes)
        async with audited(self.repo, "limits.set_task", "queue", queue,
                           {"task": task, "changes": dict(checked)}) as change:
            return await change.repo.configure_task(queue, task, lambda current: current.merged(checked))

    async def apply_declared_tasks(self, declared: Mapping[tuple[str, str], TaskSettings]) -> None:
        """Apply the limits tasks declare (`@pipeline(limits=...)` in each queue a node serves,
        DL_TASK_LIMITS_JSON) at a node's start, by (queue, task), to every task whose limits were
        not set at run time in that queue."""
        for (queue, task), settings in sorted(declared.items()):
            if settings.limited:
                await self.repo.declare_task(check_queue_name(queue), check_task_name(task), settings)

    async def apply_declared(self, declared: Mapping[str, QueueSettings]) -> None:
        """Apply the limits a node declares (code, settings) at its start, to every queue whose
        limits were not set at run time."""
        for queue, settings in declared.items():
            await self.repo.declare(check_queue_name(queue), settings)

    async def list(self) -> list[QueueFlow]:
        """Every queue that is paused, configured, or has queued or running jobs, with its current
        use and its autoscaling signal (`desired_workers`, the default target)."""
        flows = await self.repo.list()
        desired = {s.queue: s.desired_workers for s in await self.scaling()}
        return [replace(f, desired_workers=desired.get(f.queue, f.running)) for f in flows]

    async def scaling(self, queue: str | None = None, target_sec: float = DEFAULT_TARGET_SEC) -> list[QueueScaling]:
        """The autoscaling signal (flow/scaling.py) of `queue`, or of every queue with live jobs or
        flow state: the job slots each wants on all nodes now, and why."""
        if queue is not None:
            check_queue_name(queue)
        if isinstance(target_sec, bool) or not isinstance(target_sec, int | float) or not math.isfinite(target_sec) \
                or not 1 <= target_sec <= TARGET_MAX_SEC:
            raise ValidationFailed(f"target_sec: must be a number of seconds from 1 to {TARGET_MAX_SEC:g}",
                                   [{"loc": ["target_sec"], "msg": f"must be from 1 to {TARGET_MAX_SEC:g}",
                                     "type": "value_error"}])
        rows = await self.repo.scaling_inputs(queue, SCALING_WINDOW_SEC)
        # the runnable jobs limited tasks' concurrency holds back (one read of the limited tasks only)
        task_held = {q: sum(t.held_back["concurrency"] for t in tasks.values())
                     for q, tasks in (await self.repo.task_limits(queue)).items()}
        return [desired_workers(queue=r["queue"], runnable=r["runnable"], running=r["running"],
                                oldest_age_sec=r["oldest_age_sec"], finished_recently=r["finished_recently"],
                                window_sec=SCALING_WINDOW_SEC, paused=r["paused"], concurrency=r["concurrency"],
                                target_sec=float(target_sec), task_held=task_held.get(r["queue"], 0)) for r in rows]

    async def refresh_metrics(self, *, clear: bool = True) -> None:
        """Set dl_queue_paused and dl_task_paused from the database: 1 while paused, 0 once resumed.
        `clear=False` adds to what another shard's manager set (the caller cleared them)."""
        states = await self.repo.paused_states()
        if clear:
            metrics.QUEUE_PAUSED.clear()
        for queue, paused in states.items():
            metrics.QUEUE_PAUSED.labels(queue).set(1 if paused else 0)
        if clear:
            metrics.QUEUE_DESIRED_WORKERS.clear()
        for scaling in await self.scaling():
            metrics.QUEUE_DESIRED_WORKERS.labels(scaling.queue).set(scaling.desired_workers)
        tasks = await self.repo.paused_tasks()
        if clear:
            metrics.TASK_PAUSED.clear()
        for (queue, task), (paused, _) in tasks.items():
            metrics.TASK_PAUSED.labels(queue, task).set(1 if paused else 0)
        await self.refresh_limit_metrics(clear=clear)

    async def refresh_limit_metrics(self, *, clear: bool = True) -> None:
        """Set dl_flow_limit, dl_flow_in_use and dl_flow_held_back from the database, for every
        queue with a limit (a queue whose limits were cleared drops out), and the dl_task_* ones
        for every task with a limit of its own (0027)."""
        gauges = (metrics.FLOW_LIMIT, metrics.FLOW_IN_USE, metrics.FLOW_HELD_BACK_NOW)
        limited = [q for q in await self.repo.list() if q.settings.limited]
        for gauge in gauges if clear else ():
            gauge.clear()
        for flow in limited:
            s = flow.settings
            for name, limit in (("concurrency", s.concurrency), ("partition_concurrency", s.partition_concurrency),
                                ("rate", s.rate_limit), ("partition_rate", s.partition_rate_limit)):
                if limit is None:
                    continue
                metrics.FLOW_LIMIT.labels(flow.queue, name).set(limit)
                metrics.FLOW_HELD_BACK_NOW.labels(flow.queue, name).set(flow.held_back.get(name, 0))
            if s.concurrency is not None:
                metrics.FLOW_IN_USE.labels(flow.queue, "concurrency").set(flow.running)
        task_gauges = (metrics.TASK_LIMIT, metrics.TASK_IN_USE, metrics.TASK_HELD_BACK_NOW)
        for gauge in task_gauges if clear else ():
            gauge.clear()
        for queue, tasks in (await self.repo.task_limits()).items():
            for task, tf in tasks.items():
                for name, limit, used in (("concurrency", tf.settings.concurrency, tf.running),
                                          ("rate", tf.settings.rate_limit, tf.starts)):
                    if limit is None:
                        continue
                    metrics.TASK_LIMIT.labels(queue, task, name).set(limit)
                    metrics.TASK_IN_USE.labels(queue, task, name).set(used)
                    metrics.TASK_HELD_BACK_NOW.labels(queue, task, name).set(tf.held_back[name])
