"""AppContext: the database (embedded or external), migrations, pools and services of a process."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field

import asyncpg
from sqlalchemy.ext.asyncio import AsyncEngine, async_sessionmaker

from dataloader.config import Settings
from dataloader.services.jobs import JobService
from dataloader.storage import migrate
from dataloader.storage.db import create_engine, create_pool, create_sessionmaker, redact_dsn
from dataloader.storage.embedded import EmbeddedPostgres
from dataloader.storage.repositories import JobRepository
from dataloader.workers.pipelines.registry import PipelineRegistry, load_pipeline_modules, registry

log = logging.getLogger("dataloader")


@dataclass
class AppContext:
    settings: Settings
    dsn: str
    pool: asyncpg.Pool
    engine: AsyncEngine
    sessionmaker: async_sessionmaker
    repo: JobRepository
    jobs: JobService
    registry: PipelineRegistry
    embedded: EmbeddedPostgres | None = None
    extra: dict[str, object] = field(default_factory=dict)

    @classmethod
    async def open(cls, settings: Settings, *, migrate_schema: bool = True) -> AppContext:
        embedded: EmbeddedPostgres | None = None
        dsn = settings.db_dsn
        if dsn:
            log.info("using external PostgreSQL", extra={"dsn": redact_dsn(dsn)})
        else:
            embedded = EmbeddedPostgres(settings.data_dir)
            dsn = await asyncio.to_thread(embedded.start)
            log.info("using embedded PostgreSQL (DL_DB_DSN unset)",
                     extra={"data_dir": str(embedded.data_dir), "dsn": dsn})
        try:
            load_pipeline_modules(settings.pipeline_module_names)
            if migrate_schema:
                await migrate.upgrade(dsn)
            concurrency = sum(w.concurrency for w in settings.workers)
            pool = await create_pool(dsn, min_size=0, max_size=concurrency + settings.db_pool_extra)
        except BaseException:
            if embedded is not None:
                await asyncio.to_thread(embedded.stop)
            raise
        engine = create_engine(dsn)
        repo = JobRepository(pool)
        jobs = JobService(repo, registry, default_lease_ttl_sec=settings.default_lease_ttl_sec,
                          max_args_bytes=settings.max_args_bytes)
        return cls(settings=settings, dsn=dsn, pool=pool, engine=engine,
                   sessionmaker=create_sessionmaker(engine), repo=repo, jobs=jobs, registry=registry,
                   embedded=embedded)

    async def close(self, *, locks_held: bool = False) -> None:
        """Close pools and stop the embedded server. `locks_held`: some connections still hold the
        lock_key of a sync pipeline that could not be interrupted; do not wait for them."""
        if locks_held:
            self.pool.terminate()
        else:
            try:
                await asyncio.wait_for(self.pool.close(), timeout=10)
            except TimeoutError:
                self.pool.terminate()
        await self.engine.dispose()
        if self.embedded is not None:
            await asyncio.to_thread(self.embedded.stop)  # logs whether it stopped or stays up
