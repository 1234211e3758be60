"""A tiny leader-only service for the fail-over tests, loaded into `dataloader worker` processes
through DL_PIPELINE_MODULES: every 0.1 s it writes its process id to `test_leader_ticks`, so the
table shows which process ran leader duties, and when.

Why a test service and not a built-in one: no leader-only duty exists yet whose work is not
already done elsewhere (queue depth is read per scrape by /metrics); the pruner and the cron
scheduler will be the first real ones.
"""

from __future__ import annotations

import os

import asyncpg

from dataloader.maintenance import PeriodicService, PeriodicSettings, Scope, ServiceDeps, register_service

# Never import this module into the test process: registering it would add the probe (and an
# election) to every WorkerManager the other tests build. Its table is made by failover.py.


class LeaderProbe(PeriodicService):
    name = "leader_probe"
    scope = Scope.LEADER

    def __init__(self, pool: asyncpg.Pool) -> None:
        super().__init__(PeriodicSettings(period_sec=0.1, jitter=0))
        self.pool = pool

    async def tick(self) -> None:
        await self.pool.execute("INSERT INTO test_leader_ticks (pid) VALUES ($1)", os.getpid())


@register_service
def leader_probe(deps: ServiceDeps) -> LeaderProbe:
    return LeaderProbe(deps.pool)
