"""A queue's depth by state: what an operator reads first (the console's overview,
`GET /api/v1/stats/depths`, `app.queue_depths()`)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any


@dataclass(frozen=True, slots=True)
class QueueDepth:
    """One queue, now, on all nodes. `queued` jobs are due (runnable now), `delayed` ones wait for
    their `available_at` (a retry's backoff, a timer, an enqueue with a delay); `held` are dead
    letters (failed jobs kept for an operator). `oldest_waiting_sec` is the age of the oldest due job
    (None when none is due): the number that says a queue is falling behind."""

    queue: str
    queued: int = 0
    delayed: int = 0
    running: int = 0
    held: int = 0
    oldest_waiting_sec: float | None = None
    # The shard that holds these jobs, named only when there are several (DL_SHARDS_JSON).
    shard: str | None = None

    def on_shard(self, shard: str) -> QueueDepth:
        return replace(self, shard=shard)

    def to_dict(self) -> dict[str, Any]:
        row = {"queue": self.queue, "queued": self.queued, "delayed": self.delayed, "running": self.running,
               "held": self.held, "oldest_waiting_sec": self.oldest_waiting_sec}
        return row if self.shard is None else {**row, "shard": self.shard}
