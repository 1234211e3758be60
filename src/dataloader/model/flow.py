"""Flow control's values (issue 21): a queue's flow state as every layer sees it."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from dataloader.model.clock import iso

QUEUE_NAME_MAX = 200  # the job request's limit on `queue` (jobs/manager.py JobRequest)
TASK_NAME_MAX = 200  # and on `task`


@dataclass(frozen=True, slots=True)
class QueueFlow:
    """One queue: paused or not, since when, and its current use on all nodes (running and queued
    jobs). A queue with no flow state and no live job is not listed anywhere: it is simply open."""

    queue: str
    paused: bool
    paused_at: datetime | None = None
    running: int = 0
    queued: int = 0
    # claims go round-robin across the jobs' partition keys (0024), each key by its weight (a key
    # not named weighs 1; None: every key weighs 1)
    fair_share: bool = False
    fair_weights: dict[str, float] | None = None
    # the queue's paused tasks (0025) and since when: nothing of them starts, the others run
    paused_tasks: dict[str, datetime] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"queue": self.queue, "paused": self.paused,
                "paused_at": iso(self.paused_at) if self.paused_at is not None else None,
                "running": self.running, "queued": self.queued, "fair_share": self.fair_share,
                "fair_weights": self.fair_weights,
                "paused_tasks": {task: iso(at) for task, at in self.paused_tasks.items()}}
