"""The storage of the queue's own tables over time: how big each is (heap, indexes, TOAST), how many
dead tuples it carries and when autovacuum and autoanalyze last ran, so a steady state, or a
slow bloat, can be seen (docs/observability.md "Storage").

Why a sampler, on the leader only: the sizes stat every file of every relation and walk the
partition trees, which is cheap once but not at every scrape of every node (N nodes scraped every
15 s would multiply it for nothing: they all read the same database). So one node samples every
DL_STORAGE_SAMPLE_SEC (default 5 min) into dl_storage_samples (migration 0040), keeps
DL_STORAGE_SAMPLE_KEEP (7 days), and every node's /metrics reads only the newest sample (one index
probe). The console draws the trend from the older samples; Prometheus keeps its own.

The oldest xmin (what holds VACUUM back) is not sampled: it is read at each scrape already
(health/reader.py, dl_db_oldest_xmin_age_seconds), and the Storage report carries the reading.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from pydantic import Field

from dataloader.config import Settings
from dataloader.maintenance.periodic import PeriodicService, PeriodicSettings
from dataloader.maintenance.service import Scope
from dataloader.model.clock import SYSTEM_CLOCK, Clock, iso
from dataloader.storage.health_repository import HealthRepository

log = logging.getLogger("dataloader.health.storage")

# How far back the report's trend reaches, and the changes it states (seconds ago).
TREND_WINDOW_SEC = 24 * 3600.0
CHANGES_OVER = (("1h", 3600.0), ("6h", 6 * 3600.0), ("24h", 24 * 3600.0))


class StorageSettings(PeriodicSettings):
    period_sec: float = Field(default=300, ge=10, le=86400, description="DL_STORAGE_SAMPLE_SEC")
    keep_sec: float = Field(default=7 * 86400, ge=3600, le=365 * 86400, description="DL_STORAGE_SAMPLE_KEEP")

    @classmethod
    def from_settings(cls, settings: Settings) -> StorageSettings:
        return cls(period_sec=settings.storage_sample_sec, keep_sec=settings.storage_sample_keep)


class StorageSampler(PeriodicService):
    name = "storage_sampler"
    scope = Scope.LEADER

    settings: StorageSettings

    def __init__(self, repo: HealthRepository, settings: StorageSettings | None = None, *,
                 clock: Clock = SYSTEM_CLOCK, rng: random.Random | None = None) -> None:
        super().__init__(settings or StorageSettings(), clock=clock, rng=rng)
        self.repo = repo

    async def tick(self) -> int:
        rows = await self.repo.sample_storage()
        await self.repo.prune_storage_samples(self.settings.keep_sec)
        return len(rows)


@dataclass(frozen=True)
class TableStorage:
    """One table in the newest sample, with how its total size changed (bytes; None: no sample
    that old yet)."""

    table: str
    heap_bytes: int
    index_bytes: int
    toast_bytes: int
    live_tuples: int
    dead_tuples: int
    last_autovacuum: datetime | None
    last_autoanalyze: datetime | None
    changes: dict[str, int | None] = field(default_factory=dict)
    trend: list[int] = field(default_factory=list)  # total bytes, hour by hour, oldest first

    @property
    def total_bytes(self) -> int:
        return self.heap_bytes + self.index_bytes + self.toast_bytes

    def to_dict(self) -> dict[str, Any]:
        return {"table": self.table, "heap_bytes": self.heap_bytes, "index_bytes": self.index_bytes,
                "toast_bytes": self.toast_bytes, "total_bytes": self.total_bytes, "live_tuples": self.live_tuples,
                "dead_tuples": self.dead_tuples, "last_autovacuum": _iso(self.last_autovacuum),
                "last_autoanalyze": _iso(self.last_autoanalyze), "changes": self.changes, "trend": self.trend}


@dataclass(frozen=True)
class StorageReport:
    """The newest sample of every table we own, biggest first, its time (None: never sampled),
    and what holds the xmin horizon now (None: nothing)."""

    sampled_at: datetime | None
    tables: list[TableStorage]
    oldest_xmin: dict[str, Any] | None

    @property
    def total_bytes(self) -> int:
        return sum(t.total_bytes for t in self.tables)

    def to_dict(self) -> dict[str, Any]:
        return {"sampled_at": _iso(self.sampled_at), "total_bytes": self.total_bytes,
                "tables": [t.to_dict() for t in self.tables], "oldest_xmin": self.oldest_xmin}


def _iso(value: datetime | None) -> str | None:
    return iso(value) if value is not None else None


def _epoch(value: datetime | float) -> float:
    return value.timestamp() if isinstance(value, datetime) else float(value)


def _time(epoch: float | None) -> datetime | None:
    return datetime.fromtimestamp(epoch, UTC) if epoch is not None else None


def storage_report(latest: Sequence[Mapping[str, Any]], trend: Sequence[Mapping[str, Any]],
                   oldest_xmin: Mapping[str, Any] | None) -> StorageReport:
    """The report of the newest sample's rows and the hourly trend rows (pure: tested on its own).
    A change over 6h is the newest total minus the total of the last sample at least 6 h older."""
    by_table: dict[str, list[Mapping[str, Any]]] = {}
    for row in trend:
        by_table.setdefault(row["table"], []).append(row)
    sampled = max((row["sampled_at"] for row in latest), default=None)
    tables = []
    for row in latest:
        total = row["heap_bytes"] + row["index_bytes"] + row["toast_bytes"]
        history = sorted(by_table.get(row["table"], []), key=lambda r: _epoch(r["sampled_at"]))
        changes: dict[str, int | None] = {}
        for label, seconds in CHANGES_OVER:
            older = [r for r in history if sampled is not None and sampled - _epoch(r["sampled_at"]) >= seconds]
            changes[label] = total - older[-1]["total_bytes"] if older else None
        tables.append(TableStorage(
            table=row["table"], heap_bytes=row["heap_bytes"], index_bytes=row["index_bytes"],
            toast_bytes=row["toast_bytes"], live_tuples=row["live_tuples"], dead_tuples=row["dead_tuples"],
            last_autovacuum=_time(row["last_autovacuum"]), last_autoanalyze=_time(row["last_autoanalyze"]),
            changes=changes, trend=[r["total_bytes"] for r in history]))
    tables.sort(key=lambda t: (-t.total_bytes, t.table))
    xmin = None
    if oldest_xmin is not None:
        xmin = {"kind": oldest_xmin["kind"], "pid": oldest_xmin["pid"],
                "application_name": oldest_xmin["application_name"], "state": oldest_xmin["state"],
                "age_sec": round(float(oldest_xmin["age_sec"] or 0.0), 1),
                "xid_age": int(oldest_xmin["max_xid_age"] or 0)}
    return StorageReport(sampled_at=_time(sampled), tables=tables, oldest_xmin=xmin)
