"""Services contributed by user modules, the way pipelines are: a module listed in
DL_PIPELINE_MODULES (or an entry point) calls `register_service(factory)` at import, and every
node the process builds (`dataloader.node.build_node`) makes one from it.

This is how a `dataloader worker` process gets a duty that is not built in (the fail-over test's
leader-only probe service is one). Code that builds its own node can pass `services=`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import asyncpg

from dataloader.config import Settings
from dataloader.maintenance.service import Service
from dataloader.storage.notifier import Notifier
from dataloader.storage.repositories import JobRepository


@dataclass(frozen=True)
class ServiceDeps:
    """What a service factory may build on."""

    settings: Settings
    dsn: str
    pool: asyncpg.Pool
    repo: JobRepository
    # The node's listening session: a duty with a `channel` hears it here (`notifier=deps.notifier`)
    # instead of opening a session of its own.
    notifier: Notifier | None = None


ServiceFactory = Callable[[ServiceDeps], Service]

_FACTORIES: list[ServiceFactory] = []


def register_service(factory: ServiceFactory) -> ServiceFactory:
    """Add a factory (usable as a decorator); registering the same one twice is a no-op, so a
    module imported twice does not run its duty twice."""
    if factory not in _FACTORIES:
        _FACTORIES.append(factory)
    return factory


def registered_services() -> list[ServiceFactory]:
    return list(_FACTORIES)
