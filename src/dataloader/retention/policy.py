"""Retention rules: how long a finished job is kept, per status and per queue. Pure (no I/O):
the pruner (`retention/pruner.py`), `App.prune` and the CLI ask a `RetentionPolicy` for the
age of each (queue, status) and delete what is older.

Defaults: succeeded and canceled jobs 7 days, failed and lost ones 30 days (operators look at
those: what failed, why, and whether to retry). Globally per status (DL_RETENTION_SUCCEEDED, …),
and per queue over that (DL_RETENTION_QUEUES_JSON). Per-queue rules are a setting, not a table:
they are deployment configuration like WORKERS_JSON, versioned with it, identical on every node
that reads the same environment, and need no admin API or migration to change.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from dataloader.config import Settings
from dataloader.model.job import FINISHED_STATUS_NAMES as FINISHED_STATUSES


@dataclass(frozen=True)
class RetentionPolicy:
    """Age in seconds after which a finished job of a status is deleted; `queues` overrides it
    for some (queue, status)."""

    ages: Mapping[str, float]
    queues: Mapping[str, Mapping[str, float]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        unknown = set(self.ages) - set(FINISHED_STATUSES)
        for ages in self.queues.values():
            unknown |= set(ages) - set(FINISHED_STATUSES)
        if unknown:
            raise ValueError(f"not finished statuses: {sorted(unknown)}")

    @classmethod
    def from_settings(cls, settings: Settings) -> RetentionPolicy:
        return cls(ages={"succeeded": settings.retention_succeeded, "canceled": settings.retention_canceled,
                         "failed": settings.retention_failed, "lost": settings.retention_lost},
                   queues=settings.retention_queues_json)

    @classmethod
    def uniform(cls, age_sec: float, statuses: Iterable[str] = FINISHED_STATUSES) -> RetentionPolicy:
        """One age for the given statuses (the others are kept): `dataloader jobs prune --older-than`."""
        return cls(ages={status: age_sec for status in statuses})

    def age(self, queue: str, status: str) -> float | None:
        """Seconds after which a finished job of `queue` with `status` goes; None: kept."""
        override = self.queues.get(queue, {})
        if status in override:
            return override[status]
        return self.ages.get(status)

    def rules(self, queues: Iterable[str]) -> list[tuple[str, str, float]]:
        """(queue, status, age) for every pair this policy prunes, in a stable order."""
        return [(queue, status, age) for queue in sorted(set(queues)) for status in FINISHED_STATUSES
                if (age := self.age(queue, status)) is not None]

    def describe(self) -> dict[str, object]:
        """The policy as JSON-able data (seconds), for /api/v1/retention and the CLI."""
        return {"default_sec": dict(self.ages), "queues_sec": {q: dict(a) for q, a in self.queues.items()}}
