"""The supervisor: runs a node's maintenance services, restarts a crashed one with capped
exponential backoff, starts the leader-only ones while this node leads and stops them the moment
it does not, stops everything in reverse order, and reports each one's state.

Oban runs every plugin under a supervisor; River's maintainer starts its services together and
stops them together. Here one object does both so that `/status` and the metrics read one source.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from pydantic import BaseModel, ConfigDict, Field

from dataloader import metrics
from dataloader.maintenance.leader import LeaderElector
from dataloader.maintenance.service import Scope, Service, ServiceState
from dataloader.model.clock import SYSTEM_CLOCK, Clock

log = logging.getLogger("dataloader.maintenance")


class BackoffPolicy(BaseModel):
    """Delay before the n-th restart in a row: base × 2^(n-1), at most `cap_sec`. A run that lasted
    `reset_after_sec` counts as healthy, so the next crash starts from `base_sec` again."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    base_sec: float = Field(default=1.0, gt=0, le=3600)
    cap_sec: float = Field(default=60.0, gt=0, le=24 * 3600)
    reset_after_sec: float = Field(default=60.0, ge=0, le=24 * 3600)
    max_restarts: int | None = Field(default=None, ge=0, description="None: restart forever")

    def delay(self, crashes_in_a_row: int) -> float:
        exponent = min(max(crashes_in_a_row - 1, 0), 60)  # 2**60 × base is past any cap already
        return min(self.cap_sec, self.base_sec * 2.0**exponent)


@dataclass(frozen=True)
class ServiceSnapshot:
    """What /status shows of one duty at one instant; its `state` (a ServiceState) is the part that
    moves (running, backoff, standby...)."""

    name: str
    scope: Scope
    state: ServiceState
    restarts: int
    last_error: str | None
    last_error_at: datetime | None
    last_tick_at: datetime | None


class _Entry:
    def __init__(self, service: Service) -> None:
        self.service = service
        self.state = ServiceState.STANDBY if service.scope is Scope.LEADER else ServiceState.STOPPED
        self.restarts = 0
        self.keeper: asyncio.Task[None] | None = None
        self.stop_requested = asyncio.Event()

    def set_state(self, state: ServiceState) -> None:
        self.state = state
        metrics.SERVICE_UP.labels(self.service.name).set(1 if state is ServiceState.RUNNING else 0)


class Supervisor:
    """Starts `services` in order (the elector, when given, first) and stops them in reverse."""

    def __init__(self, services: Sequence[Service], *, elector: LeaderElector | None = None,
                 backoff: BackoffPolicy | None = None, clock: Clock = SYSTEM_CLOCK,
                 stop_timeout_sec: float = 10.0) -> None:
        ordered = ([elector] if elector is not None else []) + [s for s in services if s is not elector]
        names = [s.name for s in ordered]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise ValueError(f"maintenance services must have unique names; repeated: {duplicates}")
        if elector is None and any(s.scope is Scope.LEADER for s in ordered):
            raise ValueError("leader-only services need a LeaderElector")
        self.elector = elector
        if elector is not None:
            elector.on_change = self.set_leading
        self.backoff = backoff or BackoffPolicy()
        self.clock = clock
        self.stop_timeout_sec = stop_timeout_sec
        self._entries = [_Entry(s) for s in ordered]
        self._leading = False
        self._stopping = False
        self._leader_lock = asyncio.Lock()  # one leadership transition at a time
        for entry in self._entries:
            entry.set_state(entry.state)

    @property
    def services(self) -> list[Service]:
        return [e.service for e in self._entries]

    @property
    def leading(self) -> bool | None:
        """Whether this node leads; None when no election runs (no leader-only service)."""
        return None if self.elector is None else self._leading

    def status(self) -> list[ServiceSnapshot]:
        """A snapshot for /status: no I/O, safe to call from a request handler."""
        return [
            ServiceSnapshot(name=e.service.name, scope=e.service.scope, state=e.state, restarts=e.restarts,
                          last_error=e.service.last_error, last_error_at=e.service.last_error_at,
                          last_tick_at=e.service.last_tick_at)
            for e in self._entries
        ]

    async def start(self) -> None:
        for entry in self._entries:
            if entry.service.scope is Scope.EVERY_NODE:
                self._launch(entry)
        log.info("maintenance services started", extra={
            "services": {e.service.name: e.service.scope.value for e in self._entries}})

    async def stop(self) -> None:
        """Leader-only services first, then the every-node ones in reverse start order; the
        elector (first to start) is last to stop, so leadership outlives the duties it guards."""
        self._stopping = True
        async with self._leader_lock:
            await self._stop_leader_services()
        for entry in reversed(self._entries):
            if entry.service.scope is Scope.EVERY_NODE:
                await self._halt(entry, ServiceState.STOPPED)
        log.info("maintenance services stopped")

    async def set_leading(self, leading: bool) -> None:
        """Called by the elector on every leadership change. Losing leadership stops the
        leader-only services before returning, so no leader duty outlives the lock."""
        async with self._leader_lock:
            if leading == self._leading:
                return
            self._leading = leading
            if not leading:
                await self._stop_leader_services()
            elif not self._stopping:
                for entry in self._entries:
                    if entry.service.scope is Scope.LEADER:
                        self._launch(entry)

    async def _stop_leader_services(self) -> None:
        for entry in reversed(self._entries):
            if entry.service.scope is Scope.LEADER:
                await self._halt(entry, ServiceState.STANDBY)

    def _launch(self, entry: _Entry) -> None:
        if entry.keeper is not None and not entry.keeper.done():
            return
        entry.stop_requested = asyncio.Event()
        entry.keeper = asyncio.create_task(self._keep(entry), name=f"keeper:{entry.service.name}")

    async def _halt(self, entry: _Entry, final: ServiceState) -> None:
        entry.stop_requested.set()
        await entry.service.stop(self.stop_timeout_sec)
        if entry.keeper is not None:
            await asyncio.gather(entry.keeper, return_exceptions=True)
            entry.keeper = None
        if entry.state is not ServiceState.CRASHED:
            entry.set_state(final)

    async def _keep(self, entry: _Entry) -> None:
        service = entry.service
        crashes_in_a_row = 0
        while not entry.stop_requested.is_set():
            started = self.clock.monotonic()
            entry.set_state(ServiceState.RUNNING)
            try:
                await service.start()
                await service.wait()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                error: BaseException = exc
            else:
                if entry.stop_requested.is_set() or service.stopping.is_set():
                    return
                error = RuntimeError("run() returned without being asked to stop")
            if entry.stop_requested.is_set():
                return  # an error while stopping is the stop's business, not a crash to restart
            service.record_error(error)
            if self.clock.monotonic() - started >= self.backoff.reset_after_sec:
                crashes_in_a_row = 0
            crashes_in_a_row += 1
            limit = self.backoff.max_restarts
            if limit is not None and entry.restarts >= limit:
                entry.set_state(ServiceState.CRASHED)
                log.error("service %s crashed; giving up after %d restarts", service.name, entry.restarts,
                          exc_info=error, extra={"service": service.name})
                return
            delay = self.backoff.delay(crashes_in_a_row)
            entry.set_state(ServiceState.BACKOFF)
            log.error("service %s crashed; restarting in %.1f s", service.name, delay, exc_info=error,
                      extra={"service": service.name, "restart_in_sec": delay, "restarts": entry.restarts})
            if await self.clock.wait(entry.stop_requested, delay):
                return
            entry.restarts += 1
            metrics.SERVICE_RESTARTS.labels(service.name).inc()
