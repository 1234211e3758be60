"""Callers of `init`, `call` and `repair` wait here for their task to end, and followers of a
namespace's event feed for its next rows: the processes' ONE listening session per App, however
many callers and feed streams there are (a session per stream once let 100 held
`…/events/stream` requests exhaust PostgreSQL's connections).

A step's transaction sends `NOTIFY dl_process_task, '<task id>'` as it commits (apply_step.sql,
end_task.sql, delete_process.sql). One LISTEN connection per App hears it and wakes the callers
of that task, who then read the stored outcome. The task row is read once after the caller
registered (so an end that came before the registration is not missed) and then again only on a
notification, or on a bounded fallback poll (every `poll_sec` while listening, every second
while the listener is down): no busy polling.

A caller that registers before its task exists (`expect`, with the id it is about to insert) while
the listener is up skips that first read: the task cannot have ended before the registration, and
every end committed after it is heard (a lost listener wakes every caller to read).

The feed (processes/feed.py) sends `NOTIFY dl_process_feed, '<ns>'` as a row commits; each
follower holds an event of its namespace here (`feed_subscription`), set on a notification of that
namespace and on a lost listener (rows sent meanwhile were not heard).
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import asyncpg

from dataloader.storage.db import connect

log = logging.getLogger("dataloader.processes")

CHANNEL = "dl_process_task"
FEED_CHANNEL = "dl_process_feed"  # payload: the namespace whose feed has a new row
DISCONNECTED_POLL_SEC = 1.0


@dataclass(eq=False)
class Expectation:
    """A caller's registration for a task id before the task is inserted (`TaskWaiter.expect`)."""

    task_id: uuid.UUID
    # True when the listener was up as the caller registered: no end of the task can go unheard.
    heard_from_start: bool
    event: asyncio.Event = field(default_factory=asyncio.Event)


class TaskWaiter:
    def __init__(self, dsn: str, *, poll_sec: float = 10.0) -> None:
        self.dsn = dsn
        self.poll_sec = poll_sec
        self._conn: asyncpg.Connection | None = None
        self._connecting: asyncio.Lock | None = None
        self._waiting: dict[uuid.UUID, set[asyncio.Event]] = {}
        self._feeds: dict[str, set[asyncio.Event]] = {}
        self._closed = False  # closed with its App: a follower or caller left over never reconnects it

    @property
    def listening(self) -> bool:
        return self._conn is not None and not self._conn.is_closed()

    async def start(self) -> None:
        """Connect and LISTEN (again, after a loss). A failure leaves callers on the fallback poll."""
        if self.listening or self._closed:
            return
        if self._connecting is None:
            self._connecting = asyncio.Lock()
        async with self._connecting:
            if self.listening:
                return
            try:
                conn = await connect(self.dsn)
                await conn.add_listener(CHANNEL, self._handle)
                await conn.add_listener(FEED_CHANNEL, self._handle_feed)
                conn.add_termination_listener(self._lost)
            except Exception as exc:  # the database is away: callers poll until it is back
                log.warning("process waiter cannot listen; callers fall back to polling",
                            extra={"error": str(exc)})
                return
            if self._closed:  # closed while connecting
                conn.terminate()
                return
            self._conn = conn
            # Notifications sent while no one listened are gone: wake every caller to re-read.
            self._wake_all()

    async def close(self) -> None:
        self._closed = True
        conn, self._conn = self._conn, None
        if conn is not None and not conn.is_closed():
            try:
                await asyncio.wait_for(conn.close(), timeout=5)
            except (TimeoutError, OSError, asyncpg.PostgresError):
                conn.terminate()

    def _lost(self, _conn: object) -> None:
        self._conn = None
        self._wake_all()

    def _handle(self, _conn: object, _pid: int, _channel: str, payload: str) -> None:
        try:
            task_id = uuid.UUID(payload)
        except ValueError:
            return
        for event in self._waiting.get(task_id, ()):
            event.set()

    def _handle_feed(self, _conn: object, _pid: int, _channel: str, payload: str) -> None:
        for event in self._feeds.get(payload, ()):
            event.set()

    def _wake_all(self) -> None:
        for events in (*self._waiting.values(), *self._feeds.values()):
            for event in events:
                event.set()

    @contextmanager
    def feed_subscription(self, ns: str) -> Iterator[asyncio.Event]:
        """An event set when namespace `ns`'s feed may have new rows (a notification, or a lost
        listener); the follower clears it before each read. Call `start()` first to listen."""
        event = asyncio.Event()
        self._feeds.setdefault(ns, set()).add(event)
        try:
            yield event
        finally:
            events = self._feeds.get(ns)
            if events is not None:
                events.discard(event)
                if not events:
                    del self._feeds[ns]

    @property
    def feed_followers(self) -> int:
        return sum(len(events) for events in self._feeds.values())

    async def expect(self, task_id: uuid.UUID) -> Expectation:
        """Register for a task about to be inserted with this id; `forget` it when done. Passed to
        `wait` for the same id, it spares the first read."""
        await self.start()
        expectation = Expectation(task_id, heard_from_start=self.listening)
        self._waiting.setdefault(task_id, set()).add(expectation.event)
        return expectation

    def forget(self, expectation: Expectation) -> None:
        events = self._waiting.get(expectation.task_id)
        if events is not None:
            events.discard(expectation.event)
            if not events:
                del self._waiting[expectation.task_id]

    async def wait(self, task_id: uuid.UUID, read: Callable[[], Awaitable[Any]], done: Callable[[Any], bool],
                   timeout: float, expected: Expectation | None = None) -> tuple[bool, Any]:
        """Read the task until `done(record)` or `timeout` seconds pass: (True, record) or
        (False, last record). `expected`: the caller's registration from before the task was
        inserted (used only if it is for this id: an idempotent replay names an older task)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        if expected is not None and expected.task_id == task_id:
            own = None
            event, unread = expected.event, expected.heard_from_start
        else:
            own = await self.expect(task_id)
            event, unread = own.event, False
        try:
            record = None
            while True:
                if unread and not event.is_set():
                    # registered while listening, before the task existed: nothing to read until
                    # a notification, a lost listener or the fallback poll says so
                    unread = False
                else:
                    event.clear()
                    record = await read()
                    if done(record):
                        return True, record
                remaining = deadline - loop.time()
                if remaining <= 0:
                    return False, record if record is not None else await read()
                poll = self.poll_sec if self.listening else DISCONNECTED_POLL_SEC
                try:
                    await asyncio.wait_for(event.wait(), min(remaining, poll))
                except TimeoutError:
                    if not self.listening:
                        await self.start()
        finally:
            if own is not None:
                self.forget(own)
