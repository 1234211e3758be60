"""Stats of finished work, as the rollup stores it (`retention/rollup.py`): pure arithmetic on the
hourly rows — means, p95 from the log-bucket histograms, the shape of the report. No I/O.

What is measured (per job, at its finish): `run_sec` is the last attempt's run time, from the
claim that started it (its `picked` journal row) to `finished_at`; `wait_sec` is how long that
attempt waited to be claimed, from the moment it became runnable (GREATEST(created_at,
available_at), as `dl_job_queue_wait_seconds` measures it). A job that ended without running
(canceled while queued) counts as finished but has neither. The p95 comes from a histogram with
buckets 25 % apart (1 ms … 8 days), interpolated inside its bucket like Prometheus'
histogram_quantile: at most one bucket's width (25 %) off the exact value.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

# Upper bounds of the histogram buckets in seconds: 1 ms × 1.25^k up to past a week. Bucket i
# (width_bucket) holds values in [BOUNDS[i-1], BOUNDS[i]); bucket 0 is below 1 ms and bucket
# len(BOUNDS) is above the last bound. Never change these without clearing dl_stats_hist.
GROWTH = 1.25
BOUNDS: tuple[float, ...] = tuple(0.001 * GROWTH**k for k in range(93))

ERROR_GROUP_MAX_CHARS = 200


@dataclass
class Timing:
    """Count, mean, p95 and max of one measure (seconds)."""

    count: int = 0
    total: float = 0.0
    max: float | None = None
    buckets: dict[int, int] = field(default_factory=dict)

    def add(self, count: int, total: float, maximum: float | None) -> None:
        self.count += count
        self.total += total
        if maximum is not None:
            self.max = maximum if self.max is None else max(self.max, maximum)

    def add_bucket(self, bucket: int, jobs: int) -> None:
        self.buckets[bucket] = self.buckets.get(bucket, 0) + jobs

    @property
    def mean(self) -> float | None:
        return self.total / self.count if self.count else None

    def quantile(self, q: float) -> float | None:
        return histogram_quantile(self.buckets, q, maximum=self.max)

    def to_dict(self) -> dict[str, Any]:
        p95 = self.quantile(0.95)
        return {"count": self.count, "mean": _round(self.mean), "p95": _round(p95), "max": _round(self.max)}


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 6)


def histogram_quantile(buckets: Mapping[int, int], q: float, *, maximum: float | None = None) -> float | None:
    """The q-quantile of a histogram over BOUNDS (bucket index → count), linearly interpolated
    inside the bucket that holds it, and never above the observed maximum."""
    total = sum(buckets.values())
    if total <= 0:
        return None
    rank = q * total
    seen = 0
    for index in sorted(buckets):
        count = buckets[index]
        if count <= 0:
            continue
        if seen + count >= rank:
            lower = 0.0 if index == 0 else BOUNDS[index - 1]
            upper = BOUNDS[index] if index < len(BOUNDS) else (maximum if maximum is not None else lower)
            value = lower + (upper - lower) * max(rank - seen, 0) / count
            return min(value, maximum) if maximum is not None else value
        seen += count
    return maximum


def error_group(text: str | None) -> str:
    """The error group of a failure, as stats/rollup.sql computes it (for tests and callers that
    look a group up): the first line, trimmed, at most 200 characters."""
    first = (text or "").split("\n", 1)[0].strip(" \t\r")[:ERROR_GROUP_MAX_CHARS]
    return first or "(no error text)"


@dataclass
class _Bucket:
    finished: dict[str, int] = field(default_factory=dict)
    run: Timing = field(default_factory=Timing)
    wait: Timing = field(default_factory=Timing)

    def to_dict(self) -> dict[str, Any]:
        return {"finished": dict(sorted(self.finished.items())), "total": sum(self.finished.values()),
                "run_sec": self.run.to_dict(), "wait_sec": self.wait.to_dict()}


def build_report(hourly: Iterable[Mapping[str, Any]], hist: Iterable[Mapping[str, Any]],
                 oldest: Iterable[Mapping[str, Any]], *, start: datetime, end: datetime,
                 watermark: datetime | None) -> dict[str, Any]:
    """Per queue: totals over [start, end), one entry per hour, and the oldest waiting job."""
    queues: dict[str, tuple[_Bucket, dict[datetime, _Bucket]]] = {}

    def entry(queue: str, hour: datetime) -> tuple[_Bucket, _Bucket]:
        total, hours = queues.setdefault(queue, (_Bucket(), {}))
        return total, hours.setdefault(hour, _Bucket())

    for row in hourly:
        total, bucket = entry(row["queue"], row["hour"])
        for target in (total, bucket):
            target.finished[row["status"]] = target.finished.get(row["status"], 0) + row["jobs"]
            target.run.add(row["run_count"], row["run_sum"], row["run_max"])
            target.wait.add(row["wait_count"], row["wait_sum"], row["wait_max"])
    for row in hist:
        total, bucket = entry(row["queue"], row["hour"])
        for target in (total, bucket):
            timing = target.run if row["metric"] == "run" else target.wait
            timing.add_bucket(row["bucket"], row["jobs"])
    waiting = {row["queue"]: row for row in oldest}
    result = []
    for queue in sorted(set(queues) | set(waiting)):
        total, hours = queues.get(queue, (_Bucket(), {}))
        old = waiting.get(queue)
        result.append({
            "queue": queue,
            **total.to_dict(),
            "oldest_waiting": None if old is None else {
                "job_id": str(old["job_id"]), "task": old["task"], "available_at": old["available_at"],
                "age_sec": _round(old["age_sec"])},
            "hours": [{"hour": hour, **b.to_dict()} for hour, b in sorted(hours.items())],
        })
    return {"from": start, "to": end, "rolled_up_to": watermark, "queues": result}


def errors_report(rows: Sequence[Mapping[str, Any]], *, since: datetime) -> dict[str, Any]:
    return {"since": since, "errors": [
        {"queue": r["queue"], "error": r["error"], "jobs": r["jobs"], "last_at": r["last_at"],
         "last_job_id": str(r["last_job_id"])} for r in rows]}

