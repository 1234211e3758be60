"""The autoscaling signal (docs/flow-control.md "Autoscaling"): how many job slots a
queue wants across all its nodes, from its backlog, the age of its oldest runnable job, its recent
throughput and its caps. A pure function of numbers the database gives (flow/scaling_inputs.sql),
so every node computes the same figure and the rules are unit-tested without a database.

The rules, in order:
1. A paused queue wants the slots of what still runs and no more: nothing new may start.
2. No runnable backlog: the slots that are busy now (the steady state; no growth without work).
3. Otherwise the busy slots plus extra ones to drain the backlog within `target_sec`: with a known
   throughput (jobs finished in the last window) each busy slot finishes `rate / running` jobs a
   second, so `backlog / (per-slot rate x target_sec)` more slots; with none yet (a cold start, or
   jobs longer than the window) the busy slots are doubled (at least one), which grows geometrically
   while the backlog stays.
4. An oldest runnable job older than `target_sec` is already late: the extra slots are multiplied by
   its lateness (age / target_sec), at most 4x.
5. Caps, which make more slots useless: never more slots than jobs to run (running + backlog), and
   never more than the queue's global concurrency limit (its `concurrency`); the runnable
   jobs that a task's own concurrency limit holds back (0027: beyond the slots it leaves) are no
   jobs to run either.
Anything not finite or negative (a hand-written timestamp, a clock step) reads as 0, so no row can
make the figure fail (promise 9)."""

from __future__ import annotations

import math

from dataloader.model.flow import QueueScaling

DEFAULT_TARGET_SEC = 60.0
MAX_URGENCY = 4.0


def _count(value: object) -> int:
    return int(value) if isinstance(value, int | float) and math.isfinite(value) and value > 0 else 0


def _seconds(value: object) -> float:
    return float(value) if isinstance(value, int | float) and math.isfinite(value) and value > 0 else 0.0


def desired_workers(*, queue: str, runnable: object, running: object, oldest_age_sec: object,
                    finished_recently: object, window_sec: float, paused: bool, concurrency: int | None,
                    target_sec: float = DEFAULT_TARGET_SEC, task_held: object = 0) -> QueueScaling:
    """The job slots `queue` wants on all nodes now, with the inputs and the rule that decided."""
    backlog, busy = _count(runnable), _count(running)
    age, finished = _seconds(oldest_age_sec), _count(finished_recently)
    target = _seconds(target_sec) or DEFAULT_TARGET_SEC
    rate = finished / window_sec if window_sec > 0 else 0.0
    if paused:
        desired, reason = busy, "paused"
    elif backlog == 0:
        desired, reason = busy, "no backlog"
    else:
        if rate > 0:
            per_slot = rate / max(busy, 1)
            extra = math.ceil(backlog / (per_slot * target))
            reason = "backlog / throughput"
        else:
            extra = max(busy, 1)
            reason = "backlog, no throughput yet"
        urgency = min(MAX_URGENCY, age / target) if age > target else 1.0
        if urgency > 1.0:
            extra = math.ceil(extra * urgency)
            reason += ", late"
        desired = busy + extra
        if desired > busy + backlog:
            desired = busy + backlog
    startable = busy + max(0, backlog - _count(task_held))
    if not paused and desired > startable:
        desired, reason = startable, reason + ", capped by task concurrency"
    if concurrency is not None and desired > concurrency:
        desired, reason = concurrency, reason + ", capped by concurrency"
    return QueueScaling(queue=queue, desired_workers=desired, reason=reason, runnable=backlog, running=busy,
                        oldest_age_sec=age, throughput_per_sec=rate, paused=paused, concurrency=concurrency,
                        target_sec=target)
