"""SQL of the database's health as it affects the queue (`queries/health/*.sql`), read at scrape
time by dataloader.health: every statement reads catalogs, statistics views or partial indexes, is
capped, and runs on one connection under one short timeout."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import asyncpg

from dataloader.storage.queries import sql

# The parts of one reading. Each is read on its own: one that fails (a missing privilege, a view a
# server version lacks) leaves only its part out.
PARTS = ("job_alerts", "observers_waiting", "live_nodes", "connections", "oldest_xmin", "table_vacuum", "storage")


@dataclass
class HealthRows:
    """The rows of one reading; a part missing from `rows` could not be read (see `errors`)."""

    rows: dict[str, list[asyncpg.Record]] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)


class HealthRepository:
    def __init__(self, pool: asyncpg.Pool) -> None:
        self.pool = pool

    async def read(self, *, cap: int) -> HealthRows:
        result = HealthRows()
        async with self.pool.acquire() as conn:
            reads: dict[str, Callable[[], Awaitable[list[asyncpg.Record]]]] = {
                "job_alerts": lambda: conn.fetch(sql("health/job_alerts"), cap),
                "observers_waiting": lambda: conn.fetch(sql("health/observers_waiting"), cap),
                "live_nodes": lambda: conn.fetch(sql("health/live_nodes")),
                "connections": lambda: conn.fetch(sql("health/connections")),
                "oldest_xmin": lambda: conn.fetch(sql("health/oldest_xmin")),
                "table_vacuum": lambda: conn.fetch(sql("health/table_vacuum")),
                # the leader's newest storage sample (health/storage.py): one index probe
                "storage": lambda: conn.fetch(sql("health/latest_storage")),
            }
            for part in PARTS:
                try:
                    result.rows[part] = await reads[part]()
                except asyncpg.PostgresError as exc:  # a server-side refusal: the other parts still read
                    result.errors[part] = f"{type(exc).__name__}: {exc}"
        return result

    # -- the storage sampler (health/storage.py) and its readers ----------------------------------

    async def sample_storage(self) -> list[asyncpg.Record]:
        """Take and store one sample of every table we own; its rows."""
        return await self.pool.fetch(sql("health/sample_storage"))

    async def prune_storage_samples(self, keep_sec: float) -> int:
        """Drop samples older than `keep_sec`; how many rows."""
        return await self.pool.fetchval(sql("health/prune_storage_samples"), keep_sec)

    async def oldest_xmin(self) -> asyncpg.Record | None:
        """What holds the xmin horizon back longest (None: nothing)."""
        return await self.pool.fetchrow(sql("health/oldest_xmin"))

    async def latest_storage(self) -> list[asyncpg.Record]:
        """The newest sample, one row per table (none before the first sample)."""
        return await self.pool.fetch(sql("health/latest_storage"))

    async def storage_trend(self, window_sec: float) -> list[asyncpg.Record]:
        """Per table, the last sample of each hour of the last `window_sec`, oldest first."""
        return await self.pool.fetch(sql("health/storage_trend"), window_sec)
