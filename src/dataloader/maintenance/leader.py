"""Leader election in PostgreSQL: the node whose dedicated connection holds a session advisory lock
leads; every other node asks again every few seconds.

Why a dedicated connection: a session lock belongs to one connection, and a pooled one is shared,
recycled and closed when idle. Why it is safe: the lock lives exactly as long as the session, so a
leader that dies (kill -9, a lost host) stops leading when the server ends its session, with no
table, lease or clock comparison to get wrong. A leader proves on every period, with a bounded
probe, that its session is alive and still holds the lock, so a half-open TCP connection cannot
keep a dead link "leading"; and the server ends an elector session that goes quiet
(`idle_session_timeout`), so the lock of a node that vanished is freed without waiting for TCP
keepalives. Losing the connection stops the leader-only services at once (the supervisor's
`set_leading(False)` returns only when they have stopped).

Leadership changes are logged (and shown in /status and `dl_leader`); they are journaled nowhere.
"""

from __future__ import annotations

import asyncio
import logging
import math
import random
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import asyncpg
from pydantic import Field

from dataloader import metrics
from dataloader.config import Settings
from dataloader.maintenance.service import Scope, Service, ServiceSettings
from dataloader.model.clock import SYSTEM_CLOCK, Clock
from dataloader.storage import leader_lock
from dataloader.storage.db import connect, is_connection_error

log = logging.getLogger("dataloader.maintenance.leader")
T = TypeVar("T")

# The two-int advisory key of the leader lock: class "DLMT" (dataloader maintenance) and lock 1.
# Another lock of ours would take another id in the same class.
LEADER_LOCK_CLASS = 0x444C4D54
LEADER_LOCK_ID = 1

# After losing leadership, this many retry periods pass before the node campaigns again.
STEP_DOWN_PAUSE_PERIODS = 3

# application_name of the elector's session, so operators (and the fail-over test) can see in
# pg_stat_activity which node holds the lock in pg_locks.
APPLICATION_NAME_PREFIX = "dataloader-leader "


class LeaderSettings(ServiceSettings):
    retry_sec: float = Field(default=5.0, gt=0, le=300, description="DL_LEADER_RETRY_SEC")
    probe_timeout_sec: float = Field(default=5.0, gt=0, le=300, description="DL_LEADER_PROBE_TIMEOUT_SEC")
    jitter: float = Field(default=0.1, ge=0, le=0.5)

    @classmethod
    def from_settings(cls, settings: Settings) -> LeaderSettings:
        return cls(retry_sec=settings.leader_retry_sec, probe_timeout_sec=settings.leader_probe_timeout_sec)

    @property
    def session_timeout_sec(self) -> float:
        """How long the server lets an elector session stay quiet: two missed periods and a probe."""
        return 2 * self.retry_sec * (1 + self.jitter) + self.probe_timeout_sec


Connect = Callable[..., Awaitable[asyncpg.Connection]]


class LeaderElector(Service):
    """Every-node service whose run campaigns for the leader lock and reports changes through
    `on_change` (set by the supervisor). If it crashes it steps down first, and the supervisor
    restarts it like any service."""

    name = "leader_elector"
    scope = Scope.EVERY_NODE

    settings: LeaderSettings

    def __init__(self, dsn: str, settings: LeaderSettings | None = None, *, node_name: str,
                 clock: Clock = SYSTEM_CLOCK, rng: random.Random | None = None,
                 connect_fn: Connect = connect,
                 on_change: Callable[[bool], Awaitable[None]] | None = None) -> None:
        super().__init__(settings or LeaderSettings(), clock=clock)
        self.dsn = dsn
        self.node_name = node_name
        self.on_change = on_change
        self.is_leader = False
        self.backend_pid: int | None = None  # the elector session's server pid (tests, diagnostics)
        self._connect = connect_fn
        self._rng = rng or random.Random()

    async def run(self) -> None:
        self.fresh_wake()
        metrics.LEADER.labels(self.node_name).set(0)
        failures = 0
        try:
            while not self.stopping.is_set():
                conn = await self._open()
                if conn is None:
                    failures += 1
                    # Down for long: ask less often, never slower than a minute.
                    await self._pause(min(self.settings.retry_sec * 2 ** min(failures - 1, 6), 60.0))
                    continue
                failures = 0
                try:
                    await self._campaign(conn)
                except Exception as exc:
                    if not (is_connection_error(exc) or isinstance(exc, TimeoutError)):
                        raise
                    self.record_error(exc)
                    log.warning("leader election: connection lost: %s", exc or type(exc).__name__,
                                extra={"node": self.node_name, "leader": self.is_leader})
                finally:
                    was_leader = self.is_leader
                    await self._step_down("connection lost" if not self.stopping.is_set() else "stopping")
                    self.backend_pid = None
                    if not conn.is_closed():
                        conn.terminate()  # the server ends the session, which releases the lock
                if not self.stopping.is_set():
                    # A node whose leader connection just failed is the least likely to keep the
                    # next one: it sits out longer than any follower's period (retry × 1.1), so a
                    # healthy follower takes over instead of the old leader winning the lock back.
                    await self._pause(self.settings.retry_sec * STEP_DOWN_PAUSE_PERIODS if was_leader
                                      else self._period())
        finally:
            await self._step_down("elector stopped")

    async def _open(self) -> asyncpg.Connection | None:
        try:
            conn = await asyncio.wait_for(self._connect(self.dsn, server_settings={
                "application_name": (APPLICATION_NAME_PREFIX + self.node_name)[:63]}),
                timeout=self.settings.probe_timeout_sec * 2)
        except Exception as exc:
            if not (is_connection_error(exc) or isinstance(exc, TimeoutError)):
                raise
            self.record_error(exc)
            log.warning("leader election: database unreachable: %s", exc or type(exc).__name__,
                        extra={"node": self.node_name})
            return None
        try:
            if conn.get_server_version().major >= 14:
                timeout_ms = math.ceil(self.settings.session_timeout_sec * 1000)
                await self._bounded(leader_lock.set_session_timeout(conn, f"{timeout_ms}ms"))
        except Exception as exc:
            conn.terminate()
            if not (is_connection_error(exc) or isinstance(exc, TimeoutError)):
                raise
            self.record_error(exc)
            log.warning("leader election: new connection failed: %s", exc or type(exc).__name__,
                        extra={"node": self.node_name})
            return None
        except BaseException:
            conn.terminate()
            raise
        self.backend_pid = conn.get_server_pid()
        return conn

    async def _campaign(self, conn: asyncpg.Connection) -> None:
        lost = asyncio.Event()

        def on_lost(_conn: Any) -> None:
            lost.set()
            self.wake()

        conn.add_termination_listener(on_lost)
        while not self.stopping.is_set() and not lost.is_set():
            if not self.is_leader:
                if await self._bounded(leader_lock.try_lock(conn, LEADER_LOCK_CLASS, LEADER_LOCK_ID)):
                    await self._step_up()
            elif not await self._bounded(leader_lock.check(conn, LEADER_LOCK_CLASS, LEADER_LOCK_ID)):
                # Only an unlock on this very session could do that; none of our code does.
                log.error("leader election: the leader lock is no longer held by this session",
                          extra={"node": self.node_name})
                return
            self.last_tick_at = self.clock.wall()
            await self._pause(self._period(), lost)
        if lost.is_set() and not self.stopping.is_set():
            raise ConnectionError("the elector's connection was closed")

    async def _bounded(self, statement: Awaitable[T]) -> T:
        # Bounded: on a half-open connection the reply never comes, and the GuardedConnection ends
        # the session locally when the timeout cuts the query off.
        return await asyncio.wait_for(statement, timeout=self.settings.probe_timeout_sec)

    async def _pause(self, seconds: float, lost: asyncio.Event | None = None) -> None:
        # Clear first, then look: a loss or stop signalled after the look sets `_wake` again.
        self._wake.clear()
        if self.stopping.is_set() or (lost is not None and lost.is_set()):
            return
        await self.clock.wait(self._wake, seconds)

    def _period(self) -> float:
        jitter = self.settings.jitter
        return self.settings.retry_sec * self._rng.uniform(1 - jitter, 1 + jitter)

    async def _step_up(self) -> None:
        self.is_leader = True
        metrics.LEADER.labels(self.node_name).set(1)
        metrics.LEADER_ACQUIRED.labels(self.node_name).inc()
        log.info("this node is now the maintenance leader",
                 extra={"node": self.node_name, "backend_pid": self.backend_pid})
        if self.on_change is not None:
            await self.on_change(True)

    async def _step_down(self, reason: str) -> None:
        if not self.is_leader:
            return
        self.is_leader = False
        metrics.LEADER.labels(self.node_name).set(0)
        log.log(logging.INFO if self.stopping.is_set() else logging.WARNING,
                "this node is no longer the maintenance leader", extra={"node": self.node_name, "reason": reason})
        if self.on_change is not None:
            await self.on_change(False)
