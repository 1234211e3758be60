"""Callers of `init`, `call` and `repair` wait here for their task to end, callers of a workflow's
`result` for its run to end, and followers of a namespace's event feed for its next rows: three
subscriptions on the node's ONE listening session
(storage/notifier.py, shared with the workers and duties), however many callers and feed streams
there are (a session per stream once let 100 held `…/events/stream` requests exhaust
PostgreSQL's connections).

A step's transaction sends `NOTIFY dl_process_task, '<task id>'` as it commits (apply_step.sql,
end_task.sql, delete_process.sql). The notifier hears it and this waiter wakes the callers of
that task, who then read the stored outcome. A workflow run's job reaching a terminal status sends
`NOTIFY dl_workflow_end, '<run id>'` in that end's transaction (0036's trigger on dl_jobs, which
plain jobs pass by its WHEN clause); its waiters are woken the same way (a run id is a job id, never
a task id: one table of waiters serves both). The task row is read once after the caller
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
import uuid
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from dataloader.storage.notifier import Notifier, Subscription

CHANNEL = "dl_process_task"
RUN_END_CHANNEL = "dl_workflow_end"  # payload: the id of the workflow run whose job ended
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
    def __init__(self, dsn: str | None = None, *, poll_sec: float = 10.0, notifier: Notifier | None = None) -> None:
        """`notifier`: the node's listening session (None: one of its own on `dsn`, closed with
        this waiter)."""
        if notifier is None and dsn is None:
            raise ValueError("a TaskWaiter needs the node's notifier or a dsn")
        self.dsn = dsn
        self.poll_sec = poll_sec
        self._owns_notifier = notifier is None
        self.notifier = notifier if notifier is not None else Notifier(dsn)
        self._subscriptions: list[Subscription] = []
        self._subscribing: asyncio.Lock | None = None
        self._waiting: dict[uuid.UUID, set[asyncio.Event]] = {}
        self._feeds: dict[str, set[asyncio.Event]] = {}
        self._closed = False  # closed with its App: a follower or caller left over never reconnects it

    @property
    def listening(self) -> bool:
        return bool(self._subscriptions) and self.notifier.listening

    async def start(self) -> None:
        """Subscribe (once) and make sure the notifier runs; returns when its first attempt to
        listen ended. A database that is away leaves callers on the fallback poll until the
        notifier is back (which then wakes them all)."""
        if self._closed:
            return
        if self._subscribing is None:
            self._subscribing = asyncio.Lock()
        async with self._subscribing:
            if not self._subscriptions and not self._closed:
                # Notifications sent while no one listened are gone: every caller and follower
                # re-reads once the notifier listens again, and polls faster while it does not.
                self._subscriptions = [
                    await self.notifier.subscribe(CHANNEL, self._handle, on_missed=self._wake_all,
                                                  on_lost=self._wake_all),
                    await self.notifier.subscribe(RUN_END_CHANNEL, self._handle),
                    await self.notifier.subscribe(FEED_CHANNEL, self._handle_feed)]
        await self.notifier.start()

    async def close(self) -> None:
        self._closed = True
        subscriptions, self._subscriptions = self._subscriptions, []
        for subscription in subscriptions:
            await self.notifier.unsubscribe(subscription)
        if self._owns_notifier:
            await self.notifier.close()

    def _handle(self, payload: str) -> None:
        try:
            task_id = uuid.UUID(payload)
        except ValueError:
            return
        for event in self._waiting.get(task_id, ()):
            event.set()

    def _handle_feed(self, payload: str) -> None:
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
