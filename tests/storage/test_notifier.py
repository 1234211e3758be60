"""The node's one listening session (storage/notifier.py), on a real PostgreSQL: a subscriber hears
its topic and only it; topics are added and dropped on the live session; after the server
terminates the session, the notifier reconnects by itself, tells every subscriber it may have
missed something, and hears what is sent next; and a node with every duty and the process callers
holds one listening session, not one per listener."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import asyncpg
import pytest

from dataloader import App, Settings, metrics
from dataloader.storage.notifier import APPLICATION_NAME, Notifier
from tests.conftest import wait_until


def _named(dsn: str, application_name: str) -> str:
    parts = urlsplit(dsn)
    query = [*parse_qsl(parts.query), ("application_name", application_name)]
    return urlunsplit((*parts[:3], urlencode(query), parts.fragment))


class Heard:
    """What one subscriber was told."""

    def __init__(self) -> None:
        self.payloads: list[str] = []
        self.missed = 0
        self.lost = 0

    def notify(self, payload: str) -> None:
        self.payloads.append(payload)

    def on_missed(self) -> None:
        self.missed += 1

    def on_lost(self) -> None:
        self.lost += 1


@pytest.fixture
async def notifier(dsn: str) -> AsyncIterator[Notifier]:
    n = Notifier(dsn, backoff_first=0.05, backoff_cap=0.5)
    yield n
    await n.close()


async def _sessions(db: asyncpg.Pool, application_name: str) -> int:
    return await db.fetchval("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                             "AND application_name = $1", application_name)


async def _notify(db: asyncpg.Pool, topic: str, payload: str) -> None:
    await db.execute("SELECT pg_notify($1, $2)", topic, payload)


async def test_a_subscriber_hears_its_topic_only(db: asyncpg.Pool, notifier: Notifier) -> None:
    a, b = Heard(), Heard()
    await notifier.subscribe("t_notifier_a", a.notify)
    await notifier.subscribe("t_notifier_b", b.notify)
    await notifier.start()
    assert notifier.listening
    await _notify(db, "t_notifier_a", "for a")
    await _notify(db, "t_notifier_b", "for b")
    await _notify(db, "t_notifier_c", "for nobody")
    await wait_until(lambda: a.payloads and b.payloads, message="both subscribers heard")
    await asyncio.sleep(0.2)  # anything misdelivered would have arrived by now
    assert a.payloads == ["for a"] and b.payloads == ["for b"]


async def test_one_session_listens_on_every_topic_subscribed_at_runtime(db: asyncpg.Pool, dsn: str) -> None:
    name = "dl-test-one-notifier"
    notifier = Notifier(_named(dsn, name))
    try:
        await notifier.start()
        heard = [Heard() for _ in range(5)]
        # Subscribed on the live session: each LISTEN is in place when `subscribe` returns, so a
        # NOTIFY sent right after is heard, with no `on_missed` needed.
        for i, h in enumerate(heard):
            await notifier.subscribe(f"t_notifier_live_{i}", h.notify, on_missed=h.on_missed)
            await _notify(db, f"t_notifier_live_{i}", str(i))
        await wait_until(lambda: all(h.payloads for h in heard), message="every topic heard")
        assert [h.payloads for h in heard] == [[str(i)] for i in range(5)]
        assert all(h.missed == 0 for h in heard)
        assert await _sessions(db, name) == 1
        assert notifier.sessions == 1
    finally:
        await notifier.close()
    assert await wait_until(lambda: _sessions_gone(db, name), message="the session closed with the notifier")


async def _sessions_gone(db: asyncpg.Pool, name: str) -> bool:
    return await _sessions(db, name) == 0


async def test_a_dsn_without_application_name_is_named_for_operators(db: asyncpg.Pool, notifier: Notifier) -> None:
    await notifier.start()
    name = await db.fetchval("SELECT application_name FROM pg_stat_activity WHERE pid = $1", notifier.backend_pid)
    assert name == APPLICATION_NAME


async def test_unsubscribe_stops_delivery(db: asyncpg.Pool, notifier: Notifier) -> None:
    stays, leaves, alone = Heard(), Heard(), Heard()
    await notifier.start()
    await notifier.subscribe("t_notifier_shared", stays.notify)
    leaving = await notifier.subscribe("t_notifier_shared", leaves.notify)
    last = await notifier.subscribe("t_notifier_alone", alone.notify)
    await _notify(db, "t_notifier_shared", "1")
    await wait_until(lambda: stays.payloads and leaves.payloads, message="both heard the first")
    await notifier.unsubscribe(leaving)
    await notifier.unsubscribe(last)  # the topic's last subscriber: UNLISTENed
    assert notifier.topics() == ["t_notifier_shared"]
    await _notify(db, "t_notifier_shared", "2")
    await _notify(db, "t_notifier_alone", "2")
    await wait_until(lambda: len(stays.payloads) == 2, message="the one that stayed heard the second")
    await asyncio.sleep(0.2)
    assert leaves.payloads == ["1"] and alone.payloads == []
    await notifier.unsubscribe(leaving)  # twice is a no-op


async def test_after_the_server_ends_the_session_it_reconnects_and_tells_every_subscriber(
        db: asyncpg.Pool, notifier: Notifier) -> None:
    first, second = Heard(), Heard()
    await notifier.subscribe("t_notifier_r1", first.notify, on_missed=first.on_missed, on_lost=first.on_lost)
    await notifier.subscribe("t_notifier_r2", second.notify, on_missed=second.on_missed, on_lost=second.on_lost)
    await notifier.start()
    assert first.missed == second.missed == 1  # the first connect: nothing sent before it was heard
    old_pid = notifier.backend_pid
    reconnects = metrics.NOTIFIER_RECONNECTS._value.get()
    assert await db.fetchval("SELECT pg_terminate_backend($1)", old_pid)
    # Sent while the node is deaf: gone, which is why the subscribers are told to re-read.
    await wait_until(lambda: first.lost == 1 and second.lost == 1, message="subscribers told of the loss")
    await wait_until(lambda: first.missed == 2 and second.missed == 2, timeout=15,
                     message="subscribers told they may have missed notifications after the reconnect")
    assert notifier.listening and notifier.backend_pid not in (None, old_pid)
    assert notifier.reconnects == 1
    assert metrics.NOTIFIER_RECONNECTS._value.get() == reconnects + 1
    await _notify(db, "t_notifier_r1", "after")
    await _notify(db, "t_notifier_r2", "after")
    await wait_until(lambda: first.payloads == ["after"] and second.payloads == ["after"],
                     message="a NOTIFY after the reconnect heard on every topic")


async def test_an_unreachable_database_is_retried_not_raised() -> None:
    notifier = Notifier("postgresql://postgres@127.0.0.1:1/nowhere", backoff_first=0.05, backoff_cap=0.1)
    heard = Heard()
    try:
        await notifier.subscribe("t_notifier_nowhere", heard.notify, on_missed=heard.on_missed)
        await notifier.start()  # returns after the first failed attempt
        assert not notifier.listening and heard.missed == 0
        with pytest.raises(TimeoutError):
            await notifier.wait_listening(0.3)
    finally:
        await notifier.close()


async def test_a_failing_subscriber_does_not_stop_the_others(db: asyncpg.Pool, notifier: Notifier) -> None:
    heard = Heard()

    def broken(_payload: str) -> None:
        raise RuntimeError("a subscriber's bug")

    await notifier.subscribe("t_notifier_bug", broken)
    await notifier.subscribe("t_notifier_bug", heard.notify)
    await notifier.start()
    await _notify(db, "t_notifier_bug", "x")
    await wait_until(lambda: heard.payloads == ["x"], message="the second subscriber heard it")


def test_a_topic_postgres_would_truncate_is_refused() -> None:
    notifier = Notifier("postgresql://nowhere/x")
    with pytest.raises(ValueError, match="63"):
        asyncio.run(notifier.subscribe("t" * 64, print))


async def test_a_node_with_every_duty_and_process_callers_holds_one_listening_session(
        db: asyncpg.Pool, dsn: str) -> None:
    # Before the notifier a node held four to five: the workers', the scheduler's, the operation
    # runner's, the node registry's and the process waiter's (which also hears workflow runs' ends).
    name = "dl-test-node-sessions"
    async with App(Settings(db_dsn=_named(dsn, name), workers_json='[{"queue": "t-notifier", "concurrency": 1}]',
                            observer_capacity=0)) as app:
        async with app.running() as manager:
            await app.processes.waiter.start()
            assert manager.notifier is app.notifier
            every = sorted(["dl_jobs", "dl_cancel", "dl_schedules", "dl_operations", "dl_observers",
                            "dl_process_task", "dl_process_feed", "dl_workflow_end"])
            # the duties subscribe as they start, each in its own task: wait for the last one
            await wait_until(lambda: sorted(app.notifier.topics()) == every, timeout=10,
                             message=f"every duty's topic on the one session ({sorted(app.notifier.topics())})")
            assert app.notifier.sessions == 1
            pid = app.notifier.backend_pid
            listening = await db.fetch(
                "SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND application_name = $1 "
                "AND query ILIKE 'LISTEN %'", name)
            assert [r["pid"] for r in listening] == [pid]
            # `dataloader serve`: the HTTP API's App listens through its engine App's session too
            api = await app.api_app()
            try:
                assert api.notifier is app.notifier
                await api.processes.waiter.start()
                assert app.notifier.sessions == 1
            finally:
                await api.close()
            assert app.notifier.listening  # the API's close leaves the node's session to the node
