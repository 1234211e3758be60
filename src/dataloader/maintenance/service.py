"""The `Service` base: one background duty of a node (the reaper, and next the pruner, the cron
scheduler, the stats rollup, the node heartbeat), with a name, its own validated settings,
`start`/`stop` and a scope.

The shape is borrowed from River's maintenance services (a start/stop unit on a shared base, run by
a maintainer) and Oban's plugins (validated options, supervised, leader-aware): a duty is never a
hard-coded loop inside another class, so the supervisor can start, restart and report all of them
the same way.
"""

from __future__ import annotations

import asyncio
import enum
import logging
from abc import ABC, abstractmethod
from datetime import datetime
from typing import ClassVar

from pydantic import BaseModel, ConfigDict

from dataloader.model.clock import SYSTEM_CLOCK, Clock
from dataloader.storage.db import is_connection_error


class Scope(enum.StrEnum):
    """Where a service runs: on every node, or only on the node holding the leader lock."""

    EVERY_NODE = "every_node"
    LEADER = "leader"


class ServiceState(enum.StrEnum):
    """Where a duty is in its life under the supervisor (a ServiceSnapshot carries it to /status)."""

    RUNNING = "running"
    STOPPED = "stopped"
    CRASHED = "crashed"  # its run ended with an error and the supervisor gave up restarting it
    BACKOFF = "backoff"  # crashed, waiting out its restart delay
    STANDBY = "standby"  # a leader-only service on a node that does not lead


class ServiceSettings(BaseModel):
    """Base of a service's own settings: unknown keys are a mistake, and settings never change
    under a running service."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class Service(ABC):
    """A background duty. Subclasses set `name` and `scope` and implement `run()`, which must
    return soon after `stopping` is set; `start()` runs it as a task and `stop()` ends it.

    A service can be started again after it ended (that is how the supervisor restarts a crashed
    one), so per-run state belongs in `run()`, not in `__init__`.
    """

    name: ClassVar[str] = "service"
    scope: ClassVar[Scope] = Scope.EVERY_NODE

    def __init__(self, settings: ServiceSettings, *, clock: Clock = SYSTEM_CLOCK) -> None:
        self.settings = settings
        self.clock = clock
        self.last_tick_at: datetime | None = None
        self.last_error: str | None = None
        self.last_error_at: datetime | None = None
        self._stopping = asyncio.Event()
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    @abstractmethod
    async def run(self) -> None:
        """The duty itself. Raising means "crashed": the supervisor restarts it with backoff."""

    @property
    def stopping(self) -> asyncio.Event:
        return self._stopping

    @property
    def running(self) -> bool:
        return self._task is not None and not self._task.done()

    async def start(self) -> None:
        if self.running:
            raise RuntimeError(f"service {self.name!r} is already running")
        # A fresh event per run: a restart must not see the stop request of an earlier run.
        self._stopping = asyncio.Event()
        self._task = asyncio.create_task(self.run(), name=f"service:{self.name}")

    async def wait(self) -> None:
        """Until `run()` ends; raises what it raised. Cancelling the waiter leaves the service
        running (only `stop()` ends it), so a supervisor can stop watching without side effects."""
        if self._task is None:
            raise RuntimeError(f"service {self.name!r} was never started")
        await asyncio.shield(self._task)

    def request_stop(self) -> None:
        """Ask `run()` to return: it also ends a wait on the wake-up event. Subclasses that wait on
        more than these two extend this."""
        self._stopping.set()
        self._wake.set()

    def wake(self) -> None:
        """End the run's current wait on its wake-up event (`fresh_wake`) now."""
        self._wake.set()

    def fresh_wake(self) -> asyncio.Event:
        """The wake-up event of a run that waits between its steps (`clock.wait(event, delay)`),
        made anew at the run's start, so an earlier run's wake-up is not this one's; set already
        when a stop was asked before the run began."""
        self._wake = asyncio.Event()
        if self.stopping.is_set():
            self._wake.set()
        return self._wake

    async def stop(self, timeout: float = 10.0) -> None:
        """Ask `run()` to return and wait up to `timeout`; a service that does not listen is cancelled.
        Its error, if it crashed meanwhile, is left to whoever waits on it."""
        self.request_stop()
        task = self._task
        if task is None or task.done():
            return
        done, _ = await asyncio.wait({task}, timeout=timeout)
        if not done:
            task.cancel()
        await asyncio.gather(task, return_exceptions=True)

    def record_error(self, exc: BaseException) -> None:
        self.last_error = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
        self.last_error_at = self.clock.wall()

    def report_failure(self, exc: Exception, failed: str, *, unavailable: str, logger: logging.Logger,
                       extra: dict[str, object] | None = None) -> None:
        """Record a failed step that the duty rides out, and log it: a warning without traceback
        when the database is unreachable (weather: retried), an error with its traceback otherwise
        (a bug or a bad row). One copy for every duty, so the two are always told apart alike."""
        self.record_error(exc)
        extra = {"service": self.name, **(extra or {})}
        if is_connection_error(exc):
            logger.warning("%s: %s", unavailable, exc, extra=extra)
        else:
            logger.exception(failed, extra=extra)
