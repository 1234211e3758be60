"""`WakeListener`: a LISTEN connection that turns a channel's notifications into a wake-up of one
service (the scheduler on `dl_schedules`, the operation runner on `dl_operations`), so the service
sleeps on its own clock between changes instead of polling for them.

A notification sent while the connection was down is gone, so losing the connection wakes the
service too (it re-reads, and the next `ensure()` listens again). A database that cannot be reached
is not an error here: the service keeps its time-based waits, which are its backstop anyway.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

import asyncpg

from dataloader.storage.db import connect, is_connection_error

log = logging.getLogger("dataloader.maintenance")


class WakeListener:
    def __init__(self, dsn: str, channel: str, wake: Callable[[], None], *, application_name: str) -> None:
        self.dsn = dsn
        self.channel = channel
        self._wake = wake
        self._application_name = application_name
        self._conn: asyncpg.Connection | None = None

    @property
    def listening(self) -> bool:
        return self._conn is not None and not self._conn.is_closed()

    async def ensure(self) -> None:
        """Listen, unless already listening; call it before each read of what the channel announces."""
        if self.listening:
            return
        await self.close()
        try:
            conn = await asyncio.wait_for(connect(self.dsn, server_settings={
                "application_name": self._application_name}), timeout=10)
        except Exception as exc:
            if not (is_connection_error(exc) or isinstance(exc, TimeoutError)):
                raise
            log.warning("%s: cannot listen on %s yet: %s", self._application_name, self.channel,
                        exc or type(exc).__name__)
            return
        try:
            await conn.add_listener(self.channel, self._on_notify)
        except BaseException:
            conn.terminate()
            raise
        conn.add_termination_listener(self._on_lost)
        self._conn = conn

    def _on_notify(self, *_: object) -> None:
        self._wake()

    def _on_lost(self, *_: object) -> None:
        self._wake()  # re-read (and re-listen): a change may have been missed meanwhile

    async def close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None and not conn.is_closed():
            try:
                await asyncio.wait_for(conn.close(), timeout=5)
            except Exception:
                conn.terminate()
