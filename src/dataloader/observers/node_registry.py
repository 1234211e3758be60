"""`NodeHeartbeat`: the node registry's service on every node (seed 004's "service is
born / says goodbye" messages, on PostgreSQL).

At start it registers a new incarnation in `dl_nodes` (a fresh node_id each start; a live row of
the same name becomes `superseded`), then every DL_NODE_HEARTBEAT_SEC runs one statement that
renews it, marks silent nodes dead and releases their observers (`queries/nodes/heartbeat.sql`),
and on a clean stop it stops this node's observers and deregisters, handing them back at once.

It also drives this node's `ObserverRunner`: claims when there is spare capacity and work waiting,
stop requests (NOTIFY on `dl_observers`, and the heartbeat's list as a fallback), and self-fencing:
the observers never run past `fence_after` seconds after the start of the last successful
heartbeat. A node that finds itself declared dead, or had to fence, ends this run (a crash for the
supervisor), which restarts it as a new incarnation.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import uuid
from collections.abc import Sequence

import asyncpg
from pydantic import Field, model_validator

from dataloader import metrics
from dataloader.config import Settings
from dataloader.machine import process_namespace
from dataloader.maintenance.service import Scope, Service, ServiceSettings
from dataloader.model.clock import SYSTEM_CLOCK, Clock
from dataloader.observers import policy
from dataloader.observers.registry import ObserverRegistry
from dataloader.observers.registry import observers as default_kinds
from dataloader.observers.runner import FENCED, SHUTDOWN, STOP, ObserverRunner
from dataloader.storage.notifier import Notifier
from dataloader.storage.observer_repository import NodeRepository, ObserverRepository
from dataloader.version import __version__

log = logging.getLogger("dataloader.nodes")

CHANNEL = "dl_observers"


class NodeLost(Exception):
    """This incarnation may no longer run observers (declared dead, superseded, or it could not
    heartbeat in time); the supervisor restarts the service as a new incarnation."""


class NodeSettings(ServiceSettings):
    heartbeat_sec: float = Field(default=2, gt=0, le=300, description="DL_NODE_HEARTBEAT_SEC")
    dead_after_sec: float = Field(default=15, gt=0, le=3600, description="DL_NODE_DEAD_AFTER_SEC")
    capacity: int = Field(ge=0, le=100_000, description="DL_OBSERVER_CAPACITY (default from the machine)")
    stop_grace_sec: float = Field(default=3, gt=0, le=600, description="DL_OBSERVER_STOP_GRACE_SEC")
    restart_backoff_sec: float = Field(default=1, gt=0, le=3600)
    restart_backoff_max_sec: float = Field(default=60, gt=0, le=24 * 3600)
    healthy_after_sec: float = Field(default=300, gt=0, le=7 * 86400)

    @model_validator(mode="after")
    def _fencing_leaves_room(self) -> NodeSettings:
        if self.fence_after < self.heartbeat_sec:
            raise ValueError(
                f"DL_NODE_DEAD_AFTER_SEC ({self.dead_after_sec}) must be at least DL_OBSERVER_STOP_GRACE_SEC + "
                f"2 × DL_NODE_HEARTBEAT_SEC ({self.stop_grace_sec + 2 * self.heartbeat_sec}): a node must "
                "be able to miss a heartbeat and still stop its observers before others take them")
        return self

    @property
    def fence_after(self) -> float:
        return policy.fence_after(self.dead_after_sec, self.stop_grace_sec, self.heartbeat_sec)

    @property
    def quiet_sec(self) -> float | None:
        """The heartbeat period while no observer runs or waits anywhere (None: always beat every
        heartbeat_sec). Then only the node list's liveness rides on the beat, so it may be slower:
        half the fence (5 s with the defaults, so an idle node costs 0.2 statements/s, not 0.5)
        keeps a missed beat far from the dead bound. Not worth it below twice the heartbeat."""
        quiet = self.fence_after / 2
        return quiet if quiet >= 2 * self.heartbeat_sec else None

    @classmethod
    def from_settings(cls, settings: Settings) -> NodeSettings:
        capacity = settings.observer_capacity
        return cls(heartbeat_sec=settings.node_heartbeat_sec, dead_after_sec=settings.node_dead_after_sec,
                   capacity=policy.machine_capacity() if capacity is None else capacity,
                   stop_grace_sec=settings.observer_stop_grace_sec,
                   restart_backoff_sec=settings.observer_restart_backoff_sec,
                   restart_backoff_max_sec=max(settings.observer_restart_backoff_max_sec,
                                               settings.observer_restart_backoff_sec),
                   healthy_after_sec=settings.observer_healthy_after_sec)


class NodeHeartbeat(Service):
    name = "node_heartbeat"
    scope = Scope.EVERY_NODE

    settings: NodeSettings

    def __init__(self, pool: asyncpg.Pool, dsn: str, settings: NodeSettings, *, node_name: str,
                 queues: Sequence[str] = (), kinds: ObserverRegistry | None = None,
                 clock: Clock = SYSTEM_CLOCK, notifier: Notifier | None = None) -> None:
        """`notifier`: the node's listening session, where stop requests and new observers are
        heard (None: a session of its own on `dsn` for each run)."""
        super().__init__(settings, clock=clock)
        self.dsn = dsn
        self.notifier = notifier
        self.node_name = node_name
        self.queues = list(queues)
        self.nodes = NodeRepository(pool)
        self.runner = ObserverRunner(
            ObserverRepository(pool), kinds if kinds is not None else default_kinds, node_name=node_name,
            capacity=settings.capacity, stop_grace_sec=settings.stop_grace_sec,
            restart_backoff_sec=settings.restart_backoff_sec,
            restart_backoff_max_sec=settings.restart_backoff_max_sec,
            healthy_after_sec=settings.healthy_after_sec, clock=clock)
        self.node_id: uuid.UUID | None = None
        self.incarnations = 0
        self.registered = asyncio.Event()
        self._last_ok: float | None = None  # monotonic start of the last successful heartbeat
        self._lost: str | None = None
        self._quiet = False  # the last beat found no observer running or waiting anywhere

    @classmethod
    def from_settings(cls, pool: asyncpg.Pool, dsn: str, settings: Settings, *, queues: Sequence[str] = (),
                      kinds: ObserverRegistry | None = None, notifier: Notifier | None = None) -> NodeHeartbeat:
        return cls(pool, dsn, NodeSettings.from_settings(settings), node_name=settings.node_name, queues=queues,
                   kinds=kinds, notifier=notifier)

    def request_stop(self) -> None:
        super().request_stop()
        self.runner.wake.set()

    # The run of one incarnation is not LoopService's loop: it beats on its own deadline, claims
    # when woken, and must end (a crash, so a new incarnation) when this one was declared dead.

    async def run(self) -> None:
        runner = self.runner
        self._lost = None
        self._quiet = False
        self.registered.clear()
        node_id = uuid.uuid4()
        started = self.clock.monotonic()
        row = await self.nodes.register(node_id, self.node_name, socket.gethostname(), os.getpid(),
                                        __version__, self.settings.capacity, self.queues,
                                        runner.kind_names(), process_namespace())
        self.node_id, self._last_ok = node_id, started
        self.incarnations += 1
        runner.attach(node_id)
        self.registered.set()
        log.info("node registered", extra={"node": self.node_name, "node_id": str(node_id),
                                           "capacity": self.settings.capacity,
                                           "superseded": row["superseded"]})
        notifier, owned = self.notifier, self.notifier is None
        if notifier is None:
            notifier = Notifier(self.dsn)
        # A stop request or a new observer sent while the notifier was away is gone: claim and
        # look again (`on_missed`); the heartbeat's list is the backstop meanwhile.
        subscription = await notifier.subscribe(CHANNEL, runner.on_notify, on_missed=runner.wake.set)
        watchdog = asyncio.create_task(self._watchdog(), name="node-fence-watchdog")
        reason = SHUTDOWN
        try:
            await notifier.start(wait=False)
            next_beat = self.clock.monotonic() + self.settings.heartbeat_sec
            runner.wake.set()  # claim what waits right away
            while not self.stopping.is_set():
                if self._lost is not None:
                    raise NodeLost(self._lost)
                now = self.clock.monotonic()
                if now >= next_beat:
                    await self._beat(node_id)
                    next_beat = now + self._beat_period()
                if runner.wake.is_set():
                    runner.wake.clear()
                    if self._quiet:  # observers appeared (a NOTIFY): their failure detector beats fast
                        self._quiet = False
                        next_beat = min(next_beat, now + self.settings.heartbeat_sec)
                    await self._claim()
                if self.stopping.is_set():
                    break  # the stop's wake-up may have been consumed by the claim check above
                await self.clock.wait(runner.wake, max(0.0, next_beat - self.clock.monotonic()))
        except NodeLost as exc:
            reason = FENCED
            log.error("node lost its observers: %s", exc, extra={"node": self.node_name, "node_id": str(node_id)})
            raise
        finally:
            watchdog.cancel()
            runner.stop_all(reason)
            runner.cancel_timers()
            # A thread that ignores its stop keeps its place; the deregistration then waits for the
            # dead bound on the other nodes (it releases only what no longer runs here).
            all_ended = await runner.wait_all(self.settings.stop_grace_sec + 1)
            await notifier.unsubscribe(subscription)
            if owned:
                await notifier.close()
            if all_ended:
                await self._deregister(node_id)
            else:
                log.warning("node stopped with observers still running in threads; they move after the "
                            "dead bound", extra={"node": self.node_name, "still_running": list(runner.running)})
            metrics.OBSERVERS_RUNNING.set(0)

    def _beat_period(self) -> float:
        quiet = self.settings.quiet_sec
        return quiet if self._quiet and quiet is not None else self.settings.heartbeat_sec

    async def _beat(self, node_id: uuid.UUID) -> None:
        runner = self.runner
        started = self.clock.monotonic()
        try:
            await runner.retry_writes()
            beat = await self.nodes.heartbeat(node_id, self.settings.dead_after_sec, runner.kind_names())
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            self.report_failure(exc, "node heartbeat failed", unavailable="node heartbeat: database unavailable",
                                logger=log, extra={"node": self.node_name})
            return
        finally:
            metrics.NODE_HEARTBEAT_SECONDS.observe(max(self.clock.monotonic() - started, 0.0))
        self.last_tick_at = self.clock.wall()
        if not beat["alive"]:
            raise NodeLost("this incarnation was declared dead or superseded")
        self._last_ok = started
        self._quiet = bool(beat["no_observers"]) and not runner.running
        if beat["dead_nodes"]:
            metrics.NODES_MARKED_DEAD.inc(len(beat["dead_nodes"]))
            log.warning("nodes marked dead", extra={"node": self.node_name, "dead": list(beat["dead_nodes"]),
                                                    "observers_released": beat["released"]})
        for name in beat["to_stop"]:
            runner.request_stop(name, STOP)
        waiting_in = beat["next_waiting_in_sec"]
        if waiting_in is not None and runner.spare > 0:
            if waiting_in <= 0:
                runner.wake.set()
            elif waiting_in < self.settings.heartbeat_sec:
                runner.wake_in(waiting_in)

    async def _claim(self) -> None:
        if self._last_ok is None or self.clock.monotonic() - self._last_ok >= self.settings.fence_after:
            return  # not sure we are still live: claim nothing
        try:
            await self.runner.claim()
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            self.report_failure(exc, "observer claim failed", unavailable="observer claim: database unavailable",
                                logger=log)

    async def _watchdog(self) -> None:
        """Fence: stop every observer here once the last successful heartbeat is `fence_after` old
        (another node may take them `dead_after` after it)."""
        while True:
            assert self._last_ok is not None
            deadline = self._last_ok + self.settings.fence_after
            remaining = deadline - self.clock.monotonic()
            if remaining > 0:
                await asyncio.sleep(min(remaining, self.settings.heartbeat_sec))
                continue
            if self._quiet and not self.runner.running:
                # Nothing to fence (and no claim is made on a stale beat): a quiet node that missed
                # its beats stays this incarnation until the database says it was declared dead.
                await asyncio.sleep(self.settings.heartbeat_sec)
                continue
            if self.runner.running:
                log.error("node could not heartbeat for %.1fs: stopping its observers", self.settings.fence_after,
                          extra={"node": self.node_name})
            self.runner.stop_all(FENCED)
            self._lost = f"no successful heartbeat for {self.settings.fence_after:.1f}s"
            self.runner.wake.set()  # end the loop now
            return

    async def _deregister(self, node_id: uuid.UUID) -> None:
        try:
            row = await self.nodes.deregister(node_id)
        except Exception as exc:
            log.warning("node deregistration failed (its observers move after the dead bound): %s", exc,
                        extra={"node": self.node_name})
            return
        log.info("node deregistered", extra={"node": self.node_name, "node_id": str(node_id),
                                             "observers_released": row["released"]})
