"""What every queue worker of a process shares (the pool, the repository, the pipelines, the
settings, the clock), in one value the manager builds once. Its own module so that an attempt, the
queue worker and the manager can all name it without importing each other."""

from __future__ import annotations

from dataclasses import dataclass, field

import asyncpg

from dataloader.config import Settings
from dataloader.model.clock import SYSTEM_CLOCK, Clock
from dataloader.storage.repositories import JobRepository
from dataloader.workers.pipelines.registry import PipelineRegistry


@dataclass
class EngineEnv:
    """What every worker of a process shares. `quarantine`: control connections that still hold
    the lock_key of a forced-stopped sync pipeline (its thread runs on), never released."""

    pool: asyncpg.Pool
    repo: JobRepository
    registry: PipelineRegistry
    settings: Settings
    worker_name: str
    quarantine: list[asyncpg.Connection] = field(default_factory=list)
    clock: Clock = SYSTEM_CLOCK
