from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any

import asyncpg
import pytest

import tests.support.observers  # noqa: F401  (registers test.* observer kinds)
from dataloader import App, Queue, Settings
from tests.support.observers import EVENTS_DDL

TRUNCATE = "TRUNCATE dl_observers, dl_nodes, test_observer_events, test_feed, test_feed_seen, test_feed_reads"
FAST = {"node_heartbeat_sec": 0.2, "node_dead_after_sec": 2.0, "observer_stop_grace_sec": 0.5,
        "observer_restart_backoff_sec": 0.2, "observer_restart_backoff_max_sec": 1.0}


@pytest.fixture
async def odb(pool: asyncpg.Pool) -> AsyncIterator[asyncpg.Pool]:
    """The pool with no nodes, observers or probe events; emptied again afterwards, so no other
    test's App.running() finds an observer of ours to run."""
    await pool.execute(EVENTS_DDL)
    await pool.execute(TRUNCATE)
    yield pool
    await pool.execute(TRUNCATE)


def node_settings(dsn: str, name: str, **overrides: Any) -> Settings:
    values: dict[str, Any] = {"db_dsn": dsn, "workers": [Queue("obs-unused", 1)], "node_name": name,
                              "observer_capacity": 4, "retention_enabled": False, "stats_enabled": False,
                              **FAST}
    values.update(overrides)
    return Settings(**values)


@pytest.fixture
def make_app(dsn: str) -> Iterator[Any]:
    def make(name: str, **overrides: Any) -> App:
        return App(node_settings(dsn, name, **overrides))

    yield make
