"""`Notifier`: the node's ONE listening session. Every part of a node that wants a NOTIFY (the queue
workers on `dl_jobs` and `dl_cancel`, the scheduler on `dl_schedules`, the operation runner on
`dl_operations`, the node registry on `dl_observers`, process callers and feed followers on
`dl_process_task` and `dl_process_feed`) subscribes to its topic here instead of opening a
session of its own. A session per listener once cost a node four or five connections for nothing
but waiting (docs/scaling.md "Connection budget").

The shape is River's notifier (one dedicated connection, LISTEN on the union of the subscribed
topics, subscriptions per topic), written for asyncio and asyncpg:

- `subscribe(topic, on_notify, on_missed=…, on_lost=…)` at any time: on a live session the LISTEN
  is in place when it returns, so a subscriber that reads what it watches right after subscribing
  misses nothing from then on. `unsubscribe` UNLISTENs a topic nobody wants any more.
- A notification sent while no session listened is gone for good. So when the session is lost
  (the server terminated it, restarted, or a half-open TCP connection stopped answering the
  periodic probe), each subscriber's `on_lost` is called (it may fall back to polling), the
  notifier reconnects with its own back-off, LISTENs every topic again, and only then calls each
  subscriber's `on_missed`: re-read what you watch (workers run a claim pass, process callers
  re-read their task). The first connect tells them too: what was sent before it was not heard.
- Callbacks are plain functions called on the event loop in the order the server sent the
  notifications; a callback that needs I/O starts a task. One that raises is logged and does not
  stop the others.
- No busy polling (promise 6): while the session is up the only statement is the probe every
  `check_period` seconds; while it is down, one connection attempt per back-off step.

Self-contained: built from a DSN (or a connect function), so whichever root owns the node's
long-lived parts can own it.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from urllib.parse import parse_qs, urlsplit

import asyncpg

from dataloader import metrics
from dataloader.storage.db import connect, is_connection_error, ping

log = logging.getLogger("dataloader.notifier")

APPLICATION_NAME = "dataloader-notifier"
# PostgreSQL truncates a longer channel name (with only a NOTICE) and then sends its notifications
# under the truncated name, which no subscriber of the long name would hear: refused instead.
MAX_TOPIC_BYTES = 63
# A session lost sooner than this after it was set up counts as a failed attempt (its back-off
# grows): a server that accepts and then drops us at once must not be hammered.
HEALTHY_AFTER_SEC = 1.0

Connect = Callable[[], Awaitable[asyncpg.Connection]]


@dataclass(eq=False)
class Subscription:
    """One subscriber of one topic (`Notifier.subscribe`); pass it to `Notifier.unsubscribe`."""

    topic: str
    on_notify: Callable[[str], None]  # called with the payload of each notification on the topic
    # Called once the session listens again after a loss (and after the first connect): anything
    # sent meanwhile was not heard, so re-read what you watch.
    on_missed: Callable[[], None] | None = None
    # Called when the session is lost: nothing is heard until `on_missed`; poll if you cannot wait.
    on_lost: Callable[[], None] | None = None
    active: bool = field(default=True, init=False)


class Notifier:
    def __init__(self, dsn: str | None = None, *, connect_fn: Connect | None = None,
                 check_period: float = 30.0, connect_timeout: float = 10.0,
                 backoff_first: float = 0.25, backoff_cap: float = 30.0) -> None:
        """`dsn` (or `connect_fn`, which returns a new connection): where to listen; a DSN without
        an application_name gets APPLICATION_NAME, so the session is easy to find in
        pg_stat_activity. `check_period`: seconds between probes of an idle session."""
        if (dsn is None) == (connect_fn is None):
            raise ValueError("a Notifier needs a dsn or a connect function, not both")
        if not (0 < backoff_first <= backoff_cap):
            raise ValueError(f"back-off needs 0 < first <= cap, got {backoff_first}, {backoff_cap}")
        self._connect_fn = connect_fn or _dsn_connect(dsn)  # type: ignore[arg-type]
        self.check_period = check_period
        self.connect_timeout = connect_timeout
        self._backoff_first = backoff_first
        self._backoff_cap = backoff_cap
        self._topics: dict[str, list[Subscription]] = {}
        self._conn: asyncpg.Connection | None = None
        self._listened: set[str] = set()  # topics LISTENed on the current session
        # Serializes what runs on the session (LISTEN, UNLISTEN, the probe): asyncpg refuses a
        # second operation on a connection while one is in progress.
        self._lock = asyncio.Lock()
        self._task: asyncio.Task[None] | None = None
        # The notifier's own waits are on futures, never on `Event.wait()` tasks: it runs for the
        # node's life, and a task per wait would look like a leak to anyone counting tasks.
        self._stopping = asyncio.Event()  # the flag; `_stop` is what the waits wait on
        self._stop: asyncio.Future[None] | None = None
        self._lost: asyncio.Future[None] | None = None  # resolved by asyncpg when the session ends
        self._attempted = asyncio.Event()  # the first connection attempt ended, either way
        self._closed = False
        self.connected = asyncio.Event()  # set while the session listens
        self.sessions = 0  # sessions opened so far (the first and every reconnect)
        self.reconnects = 0  # sessions opened after a loss

    # -- life -----------------------------------------------------------------------------------

    @property
    def listening(self) -> bool:
        """True while a session listens on every subscribed topic."""
        return self.connected.is_set() and self._conn is not None and not self._conn.is_closed()

    @property
    def backend_pid(self) -> int | None:
        """The server pid of the listening session (for tests and for operators' logs)."""
        conn = self._conn
        return conn.get_server_pid() if conn is not None and not conn.is_closed() else None

    @property
    def closed(self) -> bool:
        return self._closed

    def topics(self) -> list[str]:
        return sorted(self._topics)

    async def start(self, *, wait: bool = True) -> None:
        """Start listening (once; again is a no-op, and so is a start after `close`). With `wait`,
        return when the first connection attempt ended: `listening` says how. A database that
        cannot be reached is not an error here: the notifier keeps trying, the subscribers keep
        their fallback polls."""
        if self._closed:
            return
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name="notifier")
        if wait:
            await self._attempted.wait()

    async def wait_listening(self, timeout: float = 10.0) -> None:
        """TimeoutError unless the session listens within `timeout` seconds."""
        await asyncio.wait_for(self.connected.wait(), timeout)

    async def close(self) -> None:
        """Stop listening for good and close the session; subscribers are left in place, no
        callback is called any more."""
        self._closed = True
        self._stopping.set()
        _resolve(self._stop)
        task, self._task = self._task, None
        if task is not None:
            try:
                await asyncio.wait_for(asyncio.shield(task), timeout=15)
            except TimeoutError:
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
        await self._drop(graceful=True)

    # -- subscriptions --------------------------------------------------------------------------

    async def subscribe(self, topic: str, on_notify: Callable[[str], None], *,
                        on_missed: Callable[[], None] | None = None,
                        on_lost: Callable[[], None] | None = None) -> Subscription:
        """Hear `topic`'s notifications in `on_notify` from now on. On a live session the topic is
        listened to when this returns; otherwise it will be at the next connect, followed by
        `on_missed`. Subscribing does not start the notifier."""
        if not topic or len(topic.encode()) > MAX_TOPIC_BYTES:
            raise ValueError(f"a topic is a channel name of 1 to {MAX_TOPIC_BYTES} bytes, got {topic!r}")
        sub = Subscription(topic, on_notify, on_missed, on_lost)
        self._topics.setdefault(topic, []).append(sub)
        async with self._lock:
            conn = self._conn
            if conn is not None and not conn.is_closed() and topic not in self._listened:
                try:
                    await asyncio.wait_for(conn.add_listener(topic, self._dispatch), self.connect_timeout)
                    self._listened.add(topic)
                except asyncio.CancelledError:
                    raise
                except Exception as exc:
                    # Most likely the session is dying: replace it, and the new one listens on
                    # this topic too (and tells the subscriber it may have missed something).
                    log.warning("notifier: LISTEN %s failed on the live session; reconnecting", topic,
                                extra={"topic": topic, "error": _describe(exc)})
                    conn.terminate()
        return sub

    async def unsubscribe(self, sub: Subscription) -> None:
        """Stop delivering to `sub` (at once, even if cancelled meanwhile); a topic nobody wants
        any more is UNLISTENed."""
        if not sub.active:
            return
        sub.active = False
        subs = self._topics.get(sub.topic)
        if subs is not None and sub in subs:
            subs.remove(sub)
            if not subs:
                del self._topics[sub.topic]
        if sub.topic in self._topics:
            return
        async with self._lock:
            conn = self._conn
            if sub.topic not in self._listened or sub.topic in self._topics:
                return
            self._listened.discard(sub.topic)
            if conn is None or conn.is_closed():
                return
            try:
                await asyncio.wait_for(conn.remove_listener(sub.topic, self._dispatch), self.connect_timeout)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                # Nothing is delivered for it any more either way; a failed UNLISTEN only leaves
                # the server sending notifications nobody reads, until the next session.
                log.debug("notifier: UNLISTEN %s failed: %s", sub.topic, _describe(exc))

    # -- the session ----------------------------------------------------------------------------

    def _dispatch(self, _conn: object, _pid: int, channel: str, payload: str) -> None:
        metrics.NOTIFICATIONS.labels(channel).inc()
        for sub in list(self._topics.get(channel, ())):
            if sub.active:
                _call(sub.on_notify, "on_notify", channel, payload)

    async def _run(self) -> None:
        delay = self._backoff_first
        failures = 0  # failed attempts since the last session that held
        lost_at: float | None = None  # monotonic time the last session was lost (None: never had one)
        last_error = ""
        self._stop = asyncio.get_running_loop().create_future()
        if self._stopping.is_set():
            _resolve(self._stop)
        try:
            while not self._stopping.is_set():
                try:
                    conn = await self._open()
                except asyncio.CancelledError:
                    raise
                except Exception as exc:
                    failures += 1
                    last_error = _describe(exc)
                    if not (is_connection_error(exc) or isinstance(exc, TimeoutError)):
                        log.error("notifier: cannot listen (attempt %d): %s", failures, last_error, exc_info=exc)
                    elif failures == 1:
                        log.warning("notifier: database unreachable, retrying with back-off; until then "
                                    "subscribers wake on their fallback polls only",
                                    extra={"error": last_error, "topics": self.topics()})
                    self._attempted.set()
                    delay = await self._pause(delay)
                    continue
                opened = time.monotonic()
                self.sessions += 1
                if lost_at is not None:
                    self.reconnects += 1
                    metrics.NOTIFIER_RECONNECTS.inc()
                    metrics.DB_RECONNECTS.labels("notifier").inc()
                    # The line to find at 3 a.m.: how long the node was deaf, why, which session
                    # listens now, and who was told to re-read.
                    log.warning(
                        "notifier: reconnected after %.1fs deaf (%d failed attempts); LISTEN again on %s, "
                        "telling %d subscribers to re-read what they may have missed",
                        opened - lost_at, failures, ", ".join(self.topics()) or "no topic",
                        self._count(), extra={"down_sec": round(opened - lost_at, 3), "attempts": failures,
                                              "last_error": last_error, "backend_pid": conn.get_server_pid(),
                                              "topics": self.topics(), "reconnects": self.reconnects})
                else:
                    log.info("notifier: listening", extra={"backend_pid": conn.get_server_pid(),
                                                           "topics": self.topics()})
                metrics.NOTIFIER_LISTENING.set(1)
                self._attempted.set()
                self._tell("on_missed")
                reason = await self._hold(conn)
                metrics.NOTIFIER_LISTENING.set(0)
                self.connected.clear()
                # Stopping: a clean goodbye to the server; lost: the session is dead already.
                await self._drop(graceful=self._stopping.is_set())
                if self._stopping.is_set():
                    break
                lost_at = time.monotonic()
                last_error = reason
                held = lost_at - opened
                log.warning("notifier: lost its listening session after %.1fs (%s); reconnecting, "
                            "subscribers poll meanwhile", held, reason,
                            extra={"topics": self.topics(), "error": reason})
                self._tell("on_lost")
                if held >= HEALTHY_AFTER_SEC:
                    # A session that held: reconnect at once (a terminated session is the common
                    # case, and every second deaf is a second of missed wake-ups).
                    failures, delay = 0, self._backoff_first
                else:
                    failures += 1
                    delay = await self._pause(delay)
        finally:
            metrics.NOTIFIER_LISTENING.set(0)
            self.connected.clear()
            self._attempted.set()

    async def _open(self) -> asyncpg.Connection:
        """A new session listening on every subscribed topic, or the error why not."""
        conn = await asyncio.wait_for(self._connect_fn(), self.connect_timeout)
        try:
            lost: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            conn.add_termination_listener(lambda _c: _resolve(lost))
            async with self._lock:
                # Topics subscribed while this lock is held wait for it and then find the session.
                # (A topic subscribed before the lock but after this list is LISTENed by its
                # subscribe, which finds this session once the lock is free.)
                topics = list(self._topics)
                for topic in topics:
                    await asyncio.wait_for(conn.add_listener(topic, self._dispatch), self.connect_timeout)
                self._conn, self._listened, self._lost = conn, set(topics), lost
                self.connected.set()
        except BaseException:
            conn.terminate()
            raise
        return conn

    async def _hold(self, conn: asyncpg.Connection) -> str:
        """Wait while the session listens; the reason it ended ("" when stopped)."""
        lost, stop = self._lost, self._stop
        assert lost is not None and stop is not None
        while not self._stopping.is_set():
            if lost.done() or conn.is_closed():
                return "the server closed the session"
            await asyncio.wait((lost, stop), timeout=self.check_period, return_when=asyncio.FIRST_COMPLETED)
            if lost.done() or self._stopping.is_set():
                continue
            # A half-open TCP connection never reports its death: probe it now and then.
            try:
                async with self._lock:
                    await asyncio.wait_for(ping(conn), timeout=self.connect_timeout)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                return f"the probe failed: {_describe(exc)}"
        return ""

    async def _drop(self, *, graceful: bool) -> None:
        async with self._lock:
            conn, self._conn = self._conn, None
            self._listened = set()
        self.connected.clear()
        if conn is None or conn.is_closed():
            return
        if graceful:
            try:
                await asyncio.wait_for(conn.close(), timeout=5)
                return
            except Exception:
                pass
        conn.terminate()

    async def _pause(self, delay: float) -> float:
        """Wait `delay` (±20 %: nodes that lost the server together do not return in lockstep), or
        less if stopped; the next delay."""
        assert self._stop is not None
        await asyncio.wait((self._stop,), timeout=delay * random.uniform(0.8, 1.2))
        return min(delay * 2, self._backoff_cap)

    def _tell(self, what: str) -> None:
        for subs in list(self._topics.values()):
            for sub in list(subs):
                callback = getattr(sub, what)
                if sub.active and callback is not None:
                    _call(callback, what, sub.topic)

    def _count(self) -> int:
        return sum(len(subs) for subs in self._topics.values())


def _resolve(future: asyncio.Future[None] | None) -> None:
    if future is not None and not future.done():
        future.set_result(None)


def _call(callback: Callable[..., None], what: str, topic: str, *args: object) -> None:
    try:
        callback(*args)
    except Exception:
        log.exception("notifier: a subscriber's %s failed", what, extra={"topic": topic})


def _describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


def _dsn_connect(dsn: str) -> Connect:
    named = "application_name" in parse_qs(urlsplit(dsn).query)

    async def connect_listener() -> asyncpg.Connection:
        # A DSN's own application_name wins (an operator's, or a test's that finds its sessions).
        if named:
            return await connect(dsn)
        return await connect(dsn, server_settings={"application_name": APPLICATION_NAME})

    return connect_listener
