"""One LISTEN connection per process: `dl_jobs` wakes the workers of a queue, `dl_cancel` stops a
running job. It reconnects with backoff; after every (re)connect all queues are woken once,
because notifications sent while it was away are gone."""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Awaitable, Callable

import asyncpg

from dataloader import metrics
from dataloader.maintenance.waiting import Backoff
from dataloader.storage.db import connect, is_connection_error, ping

log = logging.getLogger("dataloader.notifier")

JOBS_CHANNEL = "dl_jobs"
CANCEL_CHANNEL = "dl_cancel"


class Notifier:
    def __init__(
        self,
        dsn: str,
        *,
        on_queue: Callable[[str], Awaitable[None]],
        on_cancel: Callable[[uuid.UUID], None],
        on_connected: Callable[[], Awaitable[None]],
        check_period: float = 30.0,
    ) -> None:
        self.dsn = dsn
        self._on_queue = on_queue
        self._on_cancel = on_cancel
        self._on_connected = on_connected
        self._check_period = check_period
        self._stopping = asyncio.Event()
        self.connected = asyncio.Event()
        self._pending: set[asyncio.Task[None]] = set()

    def stop(self) -> None:
        self._stopping.set()

    async def run(self) -> None:
        backoff = Backoff()
        first = True
        while not self._stopping.is_set():
            try:
                conn = await connect(self.dsn)
            except Exception as exc:
                if not is_connection_error(exc):
                    log.exception("listener: cannot connect")
                elif not backoff.failing:
                    log.warning("listener: database unreachable, retrying", extra={"error": str(exc)})
                await backoff.pause(self._stopping)
                continue
            backoff.succeeded()
            try:
                await self._listen(conn, first)
                first = False
            except Exception as exc:
                if not is_connection_error(exc):
                    log.exception("listener failed")
            finally:
                self.connected.clear()
                if not conn.is_closed():
                    conn.terminate()
        log.debug("listener stopped")

    async def _listen(self, conn: asyncpg.Connection, first: bool) -> None:
        lost = asyncio.Event()
        conn.add_termination_listener(lambda _conn: lost.set())
        await conn.add_listener(JOBS_CHANNEL, self._handle)
        await conn.add_listener(CANCEL_CHANNEL, self._handle)
        self.connected.set()
        if not first:
            metrics.DB_RECONNECTS.labels("listener").inc()
            log.info("listener reconnected; waking all queues")
        await self._on_connected()
        while not self._stopping.is_set() and not lost.is_set():
            waiters = [asyncio.ensure_future(lost.wait()), asyncio.ensure_future(self._stopping.wait())]
            _done, pending = await asyncio.wait(waiters, timeout=self._check_period,
                                                return_when=asyncio.FIRST_COMPLETED)
            for waiter in pending:
                waiter.cancel()
            if not lost.is_set() and not self._stopping.is_set():
                # A half-open TCP connection never reports its death: probe it now and then.
                await asyncio.wait_for(ping(conn), timeout=10)
        if lost.is_set():
            log.warning("listener lost its database connection; reconnecting")

    def _handle(self, _conn: object, _pid: int, channel: str, payload: str) -> None:
        metrics.NOTIFICATIONS.labels(channel).inc()
        if channel == JOBS_CHANNEL:
            task = asyncio.ensure_future(self._on_queue(payload))
            self._pending.add(task)
            task.add_done_callback(self._pending.discard)
        elif channel == CANCEL_CHANNEL:
            try:
                self._on_cancel(uuid.UUID(payload))
            except ValueError:
                log.warning("ignored malformed cancel notification", extra={"payload": payload[:100]})
