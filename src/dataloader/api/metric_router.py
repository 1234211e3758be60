"""`/metrics`: Prometheus text of the process's metrics (dataloader.metrics) plus queue depth.

Queue depth and the age of the oldest runnable job come from the database and describe all nodes
sharing it. prometheus_client collects synchronously, so the route reads the numbers first (with a
short timeout) and hands them to the collector for exactly this scrape; if the database does not
answer, those series are left out and `dl_queue_stats_up` is 0, and the scrape itself still works.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator, Sequence
from typing import Any

from fastapi import APIRouter, Depends, Response
from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from dataloader.api.runtime import Runtime, get_runtime
from dataloader.health.collector import HEALTH

log = logging.getLogger("dataloader.api")

router = APIRouter(tags=["infrastructure"])

QUEUE_STATS_TIMEOUT_SEC = 1.0


class QueueStatsCollector(Collector):
    def __init__(self) -> None:
        self.snapshot: Sequence[Any] | None = None

    def _families(self) -> tuple[GaugeMetricFamily, GaugeMetricFamily, GaugeMetricFamily]:
        return (
            GaugeMetricFamily("dl_queue_stats_up",
                              "1 when this scrape read queue depth from the database, else 0"),
            GaugeMetricFamily("dl_queue_jobs", "Jobs per queue and status (queued, running), all nodes",
                              labels=["queue", "status"]),
            GaugeMetricFamily("dl_queue_oldest_runnable_age_seconds",
                              "Wait so far of the oldest queued job whose available_at has passed",
                              labels=["queue"]),
        )

    def describe(self) -> Iterator[Metric]:
        # Names only: registering must not trigger a collect (it would need the database).
        yield from self._families()

    def collect(self) -> Iterator[Metric]:
        up, depth, age = self._families()
        rows = self.snapshot
        up.add_metric([], 0 if rows is None else 1)
        yield up
        if rows is None:
            return
        for row in rows:
            depth.add_metric([row["queue"], row["status"]], row["jobs"])
            if row["status"] == "queued" and row["oldest_runnable_age_sec"] is not None:
                age.add_metric([row["queue"]], row["oldest_runnable_age_sec"])
        yield depth
        yield age


QUEUE_STATS = QueueStatsCollector()
REGISTRY.register(QUEUE_STATS)  # module import runs once per process, so this registers once
REGISTRY.register(HEALTH)  # the database's health (dataloader.health), read below for each scrape


@router.get(
    "/metrics",
    summary="Prometheus metrics",
    response_class=Response,
    responses={200: {"content": {CONTENT_TYPE_LATEST: {}}, "description": "Prometheus text format"}},
)
async def metrics(runtime: Runtime = Depends(get_runtime)) -> Response:
    rows = None
    health = None
    if runtime.app is not None:
        try:
            async with asyncio.timeout(QUEUE_STATS_TIMEOUT_SEC):
                rows = await runtime.app.queue_stats()
        except Exception as exc:  # a scrape must not fail because the database is away
            log.warning("metrics: queue stats unavailable", extra={"error": repr(exc)})
        try:  # dl_processes: processes by namespace and status
            async with asyncio.timeout(QUEUE_STATS_TIMEOUT_SEC):
                await runtime.app.processes.refresh_metrics()
        except Exception as exc:
            log.warning("metrics: process counts unavailable", extra={"error": repr(exc)})
        try:  # dl_queue_paused: flow control, the database's state on every node
            async with asyncio.timeout(QUEUE_STATS_TIMEOUT_SEC):
                await runtime.app.flow.refresh_metrics()
        except Exception as exc:
            log.warning("metrics: queue flow state unavailable", extra={"error": repr(exc)})
        # Stuck and held jobs, waiting observers, nodes, connections, xmin horizon, dead tuples
        #: never raises, each part it cannot read is left out (dl_db_health_up{part} 0).
        health = await runtime.app.health.read()
    # No await between setting and generating: no other scrape can interleave on this loop.
    QUEUE_STATS.snapshot, HEALTH.snapshot = rows, health
    try:
        data = generate_latest(REGISTRY)
    finally:
        QUEUE_STATS.snapshot = HEALTH.snapshot = None
    return Response(data, media_type=CONTENT_TYPE_LATEST)
