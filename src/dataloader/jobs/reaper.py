"""The reaper: running jobs whose lease expired go back to the queue, or end `lost`.

It runs on every node, not only on the leader: its statement (`reap_expired.sql`) takes the rows
with SKIP LOCKED, so replicas split the work instead of repeating it, and a lost lease is noticed
within one period even while no node leads (an election in progress, a leader whose connection
is being replaced).

A node also looks at the other nodes of its own machine (`nodes`, when it runs the node registry):
a node whose pid no longer runs there (kill -9, a crash; dataloader/machine.py) is dead for
certain, so its jobs are taken back at once — on a restarted node's first tick — instead of when
their leases run out. Only jobs whose claiming session is gone from the server too are taken
(running_picked_by.sql), each fenced on its attempt, and never under a name a live process on
another machine or another process here still uses: anything less certain waits for the lease.
"""

from __future__ import annotations

import logging
import os
import random
import time
import uuid
from datetime import datetime
from typing import Any

from pydantic import Field

from dataloader import metrics
from dataloader.config import Settings
from dataloader.machine import pid_running, process_namespace
from dataloader.maintenance.periodic import PeriodicService, PeriodicSettings
from dataloader.maintenance.service import Scope
from dataloader.model.clock import SYSTEM_CLOCK, Clock
from dataloader.storage.observer_repository import NodeRepository
from dataloader.storage.repositories import JobRepository

log = logging.getLogger("dataloader.jobs.reaper")


class ReaperSettings(PeriodicSettings):
    period_sec: float = Field(default=10, gt=0, le=3600, description="DL_REAPER_PERIOD_SEC")
    batch_size: int = Field(default=1000, ge=1, le=100_000, description="Jobs taken back per statement")

    @classmethod
    def from_settings(cls, settings: Settings) -> ReaperSettings:
        return cls(period_sec=settings.reaper_period_sec)


class Reaper(PeriodicService):
    name = "reaper"
    scope = Scope.EVERY_NODE

    settings: ReaperSettings

    def __init__(self, repo: JobRepository, settings: ReaperSettings | None = None, *,
                 period: float | None = None, batch_size: int | None = None,
                 clock: Clock = SYSTEM_CLOCK, rng: random.Random | None = None,
                 nodes: NodeRepository | None = None) -> None:
        # `period`/`batch_size` are shorthands (tests reap with `Reaper(repo, period=1)`); they go
        # through validation like any other setting.
        values = (settings or ReaperSettings()).model_dump()
        values.update({k: v for k, v in (("period_sec", period), ("batch_size", batch_size)) if v is not None})
        super().__init__(ReaperSettings(**values), clock=clock, rng=rng)
        self.repo = repo
        self.nodes = nodes

    async def tick(self) -> int:
        """Reap until nothing is left; returns how many jobs were taken back."""
        total = 0
        batch_size = self.settings.batch_size
        orphaned = await self.orphaned_jobs()
        while True:
            started = time.perf_counter()
            rows = await self.repo.reap_expired(batch_size, orphaned)
            orphaned = []
            metrics.REAPER_SECONDS.observe(time.perf_counter() - started)
            for row in rows:
                metrics.JOBS_REAPED.labels(row["queue"], row["status"]).inc()
                if row["reason"] == "worker_died":
                    metrics.WORKER_DEATHS_JOBS.labels(row["queue"]).inc()
                    message = "took back a job of a worker that died on this machine"
                else:
                    metrics.LEASE_EXPIRIES.labels(row["queue"], row["task"]).inc()
                    message = "reaped job with expired lease"
                log.warning(message, extra={"job_id": str(row["job_id"]), "queue": row["queue"], "task": row["task"],
                                            "attempt": row["attempt"], "new_status": row["status"]})
            total += len(rows)
            if len(rows) < batch_size:
                return total

    async def orphaned_jobs(self) -> list[tuple[uuid.UUID, int]]:
        """(job id, attempt) of the running jobs of nodes found dead on this machine (see the
        module's docstring); those nodes are declared dead on the way."""
        machine = process_namespace()
        if self.nodes is None or machine is None:
            return []
        me = os.getpid()
        by_name: dict[str, list[Any]] = {}
        for row in await self.nodes.local_names(machine):
            by_name.setdefault(row["name"], []).append(row)
        dead_nodes: list[uuid.UUID] = []
        dead_names: list[tuple[str, datetime | None]] = []
        for name, incarnations in by_name.items():
            if not all(r["here"] for r in incarnations):
                continue  # the name is used on another machine: not ours to judge
            others = [r for r in incarnations if r["pid"] != me]
            if not others or any(pid_running(r["pid"]) for r in others):
                continue
            mine = [r["started_at"] for r in incarnations if r["pid"] == me]
            dead_nodes.extend(r["node_id"] for r in others)
            dead_names.append((name, min(mine) if mine else None))
        if not dead_nodes:
            return []
        declared = await self.nodes.declare_dead(dead_nodes)  # those not declared dead already
        if declared:
            log.warning("nodes found dead on this machine: their pids no longer run",
                        extra={"nodes": sorted({r["name"] for r in declared})})
        return await self.repo.running_picked_by(dead_names)
