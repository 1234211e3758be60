"""`ObserverRunner`: the observers running on one node incarnation — claim up to capacity, run each
in isolation (an async task, or a thread of its own for a sync observer), stop them by name or all
at once, and write how each one ended (fenced on name, epoch and node).

It is driven by the node's heartbeat service (observers/node_registry.py), which owns the
incarnation: the runner never runs an observer past `fence_deadline` (the start of the last
successful heartbeat + policy.fence_after), so another node that takes the observer over after the
dead bound never runs it at the same moment.
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
import uuid
from collections.abc import Awaitable, Callable
from contextvars import copy_context
from dataclasses import dataclass, field
from typing import Any

from dataloader import metrics, tracing
from dataloader.exceptions import ObserverFenced
from dataloader.model.clock import SYSTEM_CLOCK, Clock
from dataloader.observers import policy
from dataloader.observers.context import ObserverContext
from dataloader.observers.registry import ObserverKind, ObserverRegistry
from dataloader.storage.db import is_connection_error
from dataloader.storage.observer_repository import ObserverRepository

log = logging.getLogger("dataloader.observers")

STOP = "stop"  # a stop by name: the observer ends `deleted`
SHUTDOWN = "shutdown"  # its node stops cleanly: the observer is handed back (`created`)
FENCED = "fenced"  # this node lost it (declared dead, or could not heartbeat): write nothing


@dataclass
class Running:
    ctx: ObserverContext
    kind: ObserverKind
    failures: int
    max_restarts: int | None
    started: float
    task: asyncio.Task[None] | None = None
    force: asyncio.TimerHandle | None = None
    thread: threading.Thread | None = None
    thread_done: asyncio.Future[None] | None = None
    done: asyncio.Event = field(default_factory=asyncio.Event)


class ObserverRunner:
    def __init__(self, repo: ObserverRepository, kinds: ObserverRegistry, *, node_name: str, capacity: int,
                 stop_grace_sec: float, restart_backoff_sec: float, restart_backoff_max_sec: float,
                 healthy_after_sec: float, clock: Clock = SYSTEM_CLOCK) -> None:
        self.repo = repo
        self.kinds = kinds
        self.node_name = node_name
        self.capacity = capacity
        self.stop_grace_sec = stop_grace_sec
        self.restart_backoff_sec = restart_backoff_sec
        self.restart_backoff_max_sec = restart_backoff_max_sec
        self.healthy_after_sec = healthy_after_sec
        self.clock = clock
        self.node_id: uuid.UUID | None = None
        self.running: dict[str, Running] = {}
        self.wake = asyncio.Event()  # a claim is worth trying now (NOTIFY, a restart came due)
        self._retry_writes: list[Callable[[], Awaitable[Any]]] = []
        self._timers: set[asyncio.TimerHandle] = set()

    @property
    def spare(self) -> int:
        """Free places: an observer counts until it has really ended (its thread too)."""
        return max(0, self.capacity - len(self.running))

    def kind_names(self) -> list[str]:
        return self.kinds.names() if self.capacity > 0 else []

    def attach(self, node_id: uuid.UUID) -> None:
        self.node_id = node_id

    # -- claiming and running ----------------------------------------------------------------------

    async def claim(self) -> int:
        """Take up to `spare` waiting observers and start them; how many were taken."""
        kinds = self.kind_names()
        if self.node_id is None or self.spare == 0 or not kinds:
            return 0
        rows = await self.repo.claim(self.node_id, self.spare, kinds)
        for row in rows:
            self._start(row)
        if rows:
            metrics.OBSERVER_CLAIMS.inc(len(rows))
            log.info("observers claimed", extra={"node": self.node_name, "observers": [r["name"] for r in rows]})
        return len(rows)

    def _start(self, row: Any) -> None:
        kind = self.kinds.get(row["kind"])
        assert kind is not None and self.node_id is not None  # the claim filters on our kinds
        loop = asyncio.get_running_loop()
        args = row["args"]
        checkpoint = row["checkpoint"]
        ctx = ObserverContext(name=row["name"], kind=row["kind"],
                              args=json.loads(args) if isinstance(args, str) else dict(args),
                              epoch=row["epoch"],
                              checkpoint=json.loads(checkpoint) if isinstance(checkpoint, str) else checkpoint,
                              node_id=self.node_id, node_name=self.node_name, moves=row["moves"],
                              save=self.repo.save, loop=loop)
        max_restarts = row["max_restarts"] if row["max_restarts"] is not None else kind.max_restarts
        entry = Running(ctx=ctx, kind=kind, failures=row["failures"], max_restarts=max_restarts,
                        started=self.clock.monotonic())
        self.running[ctx.name] = entry
        metrics.OBSERVERS_RUNNING.set(len(self.running))
        entry.task = asyncio.create_task(self._run(entry), name=f"observer:{ctx.name}")

    async def _run(self, entry: Running) -> None:
        ctx = entry.ctx
        # One span per run on this node (nothing when tracing is off), current for the
        # observer's own code (an async one's task, a sync one's thread), ended when the run ends.
        with tracing.child_span(f"observe {ctx.kind}", {
                "dataloader.observer.name": ctx.name, "dataloader.observer.kind": ctx.kind,
                "dataloader.observer.epoch": ctx.epoch, "dataloader.observer.moves": ctx.moves}) as span:
            error = await self._watch(entry)
            ended = ctx.stop_reason or ("raised" if error is not None else "returned")
            tracing.set_attribute(span, "dataloader.observer.end", ended)
            if error is not None and span is not None:
                span.record_exception(error)
                tracing.mark_error(span, f"{type(error).__name__}: {error}")
        try:
            await self._record_end(entry, error)
        finally:
            self.running.pop(ctx.name, None)
            metrics.OBSERVERS_RUNNING.set(len(self.running))
            entry.done.set()
            self.wake.set()  # a place is free

    async def _watch(self, entry: Running) -> BaseException | None:
        """Run the observer until it ends; returns the error it raised (None: it returned, or was
        stopped)."""
        ctx = entry.ctx
        error: BaseException | None = None
        try:
            if entry.kind.is_async:
                await entry.kind.func(ctx)
            else:
                await self._in_thread(entry)
        except asyncio.CancelledError:
            if not ctx.stop_requested:  # cancelled from outside: the node is going away
                ctx.request_stop(SHUTDOWN)
        except ObserverFenced:
            ctx.request_stop(FENCED)
        except Exception as exc:
            error = exc
        finally:
            if entry.force is not None:
                entry.force.cancel()
        if entry.thread_done is not None and not entry.thread_done.done():
            # A stuck sync observer keeps its place (and its copy) until its thread really ends.
            await asyncio.wait([entry.thread_done])
        return error

    async def _in_thread(self, entry: Running) -> None:
        """A sync observer in a thread of its own (not the default executor: a fleet of them would
        exhaust its few workers)."""
        loop = asyncio.get_running_loop()
        finished: asyncio.Future[None] = loop.create_future()
        func = entry.kind.func

        def settle(error: BaseException | None) -> None:
            if not finished.done():
                finished.set_result(None) if error is None else finished.set_exception(error)

        def target() -> None:
            error: BaseException | None = None
            try:
                func(entry.ctx)
            except BaseException as exc:  # handed to the loop, raised there
                error = exc
            loop.call_soon_threadsafe(settle, error)

        entry.thread_done = finished
        # in this task's context (the run's span, log context), as asyncio.to_thread would
        entry.thread = threading.Thread(target=copy_context().run, args=(target,),
                                        name=f"observer:{entry.ctx.name}", daemon=True)
        entry.thread.start()
        await asyncio.shield(finished)

    async def _record_end(self, entry: Running, error: BaseException | None) -> None:
        ctx = entry.ctx
        node_id = self.node_id
        assert node_id is not None
        reason = ctx.stop_reason
        if reason in (FENCED, SHUTDOWN):
            # FENCED: another node may hold it now. SHUTDOWN: the deregistration hands it back.
            log.info("observer ended", extra={"observer": ctx.name, "reason": reason})
            return
        if reason == STOP:
            log.info("observer stopped", extra={"observer": ctx.name, "node": self.node_name})
            await self._write(lambda: self.repo.finish_stopped(ctx.name, ctx.epoch, node_id))
            return
        ran = self.clock.monotonic() - entry.started
        failures = policy.failures_after_crash(entry.failures, ran, self.healthy_after_sec)
        give_up = policy.gives_up(failures, entry.max_restarts)
        delay = policy.restart_delay(failures, self.restart_backoff_sec, self.restart_backoff_max_sec)
        text = (f"{type(error).__name__}: {error}" if error is not None and str(error)
                else type(error).__name__ if error is not None
                else "returned without a stop request (an observer runs until it is stopped)")
        metrics.OBSERVER_CRASHES.labels(ctx.kind).inc()
        log.warning("observer crashed", exc_info=error, extra={
            "observer": ctx.name, "kind": ctx.kind, "failures": failures, "restart_in_sec": delay,
            "gave_up": give_up})
        await self._write(lambda: self.repo.crashed(ctx.name, ctx.epoch, node_id, text[:2000], delay, failures,
                                                    give_up))
        if not give_up:
            self.wake_in(delay)

    async def _write(self, write: Callable[[], Awaitable[Any]]) -> None:
        """An ending's write; if the database is away, retried at each heartbeat (it is fenced, so
        a late retry writes nothing once the observer moved on)."""
        try:
            await write()
        except Exception as exc:
            if not is_connection_error(exc):
                log.exception("observer: recording its end failed")
            self._retry_writes.append(write)

    async def retry_writes(self) -> None:
        pending, self._retry_writes = self._retry_writes, []
        for write in pending:
            await self._write(write)

    def wake_in(self, seconds: float) -> None:
        """Try a claim after `seconds` (a restart backoff ending, a waiting observer coming due)."""
        loop = asyncio.get_running_loop()
        handle = loop.call_later(max(0.0, seconds), self._timer_fired)
        self._timers.add(handle)

    def _timer_fired(self) -> None:
        self._timers = {t for t in self._timers if not t.cancelled() and t.when() > asyncio.get_running_loop().time()}
        self.wake.set()

    # -- stopping ---------------------------------------------------------------------------------

    def request_stop(self, name: str, reason: str) -> bool:
        """Ask one observer to return; an async one that has not returned after the grace period is
        cancelled (a thread cannot be). False when it does not run here."""
        entry = self.running.get(name)
        if entry is None:
            return False
        entry.ctx.request_stop(reason)
        if entry.task is not None and entry.force is None and entry.kind.is_async:
            entry.force = asyncio.get_running_loop().call_later(self.stop_grace_sec, entry.task.cancel)
        return True

    def stop_all(self, reason: str) -> None:
        for name in list(self.running):
            self.request_stop(name, reason)

    async def wait_all(self, timeout: float | None = None) -> bool:
        """Until every observer here has ended (True), or `timeout` passed (False)."""
        entries = [e.done.wait() for e in self.running.values()]
        if not entries:
            return True
        _, pending = await asyncio.wait([asyncio.ensure_future(e) for e in entries], timeout=timeout)
        for task in pending:
            task.cancel()
        return not pending

    def cancel_timers(self) -> None:
        for handle in self._timers:
            handle.cancel()
        self._timers.clear()

    # -- notifications ----------------------------------------------------------------------------

    def on_notify(self, payload: str) -> None:
        """'wake' → try a claim; 'stop:<node_id>:<name>' → stop it if it runs here."""
        if payload == "wake":
            self.wake.set()
            return
        if payload.startswith("stop:"):
            _, node, name = payload.split(":", 2)
            if self.node_id is not None and node == str(self.node_id):
                self.request_stop(name, STOP)
