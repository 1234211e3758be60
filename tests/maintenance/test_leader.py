"""Leader election against a real PostgreSQL, two electors in this process: exactly one leads; when
the server ends the leader's session (pg_terminate_backend) it steps down at once and the other
takes over within its retry period; a leader whose probe gets no answer (a half-open connection)
steps down after the probe timeout; a stopped leader releases the lock."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import AsyncIterator, Callable

import asyncpg
import pytest

from dataloader.maintenance import LEADER_LOCK_CLASS, LEADER_LOCK_ID, LeaderElector, LeaderSettings, Scope, Supervisor
from dataloader.storage.db import GuardedConnection, connect
from tests.conftest import wait_until
from tests.maintenance.helpers import Recorder, Steady

RETRY_SEC = 0.2
# A follower asks every RETRY_SEC × (1 ± 10 %); the rest is a round trip on a loaded machine. Timed
# from the events (the termination, the elector's on_change), not from this test's polling.
TAKEOVER_BOUND_SEC = RETRY_SEC * 1.1 + 2.0

HOLDERS = """
SELECT l.pid FROM pg_locks l
WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 2
  AND l.classid = ($1::int4)::oid AND l.objid = ($2::int4)::oid
  AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
"""


async def _holders(db: asyncpg.Pool) -> list[int]:
    return [r["pid"] for r in await db.fetch(HOLDERS, LEADER_LOCK_CLASS, LEADER_LOCK_ID)]


class Changes:
    """What the elector reported, and when (loop time): the takeover is timed from these events."""

    def __init__(self) -> None:
        self.seen: list[bool] = []
        self.at: list[float] = []

    async def __call__(self, leading: bool) -> None:
        self.seen.append(leading)
        self.at.append(asyncio.get_running_loop().time())


@pytest.fixture
async def electors(dsn: str) -> AsyncIterator[Callable[..., LeaderElector]]:
    made: list[LeaderElector] = []

    def make(name: str, **kwargs) -> LeaderElector:
        elector = LeaderElector(dsn, LeaderSettings(retry_sec=RETRY_SEC, probe_timeout_sec=1.0),
                                node_name=name, on_change=Changes(), **kwargs)
        made.append(elector)
        return elector

    yield make
    for elector in made:
        await elector.stop()


async def test_one_leads_and_the_other_takes_over_when_the_session_is_terminated(db, electors):
    a, b = electors("node-a"), electors("node-b")
    await a.start()
    await wait_until(lambda: a.is_leader, timeout=5)
    await b.start()
    await wait_until(lambda: b.backend_pid is not None, timeout=5)
    await wait_until(lambda: b.last_tick_at is not None, timeout=5)  # b has asked at least once, and lost
    assert not b.is_leader
    assert await _holders(db) == [a.backend_pid]

    loop = asyncio.get_running_loop()
    killed_at = loop.time()
    assert await db.fetchval("SELECT pg_terminate_backend($1)", a.backend_pid)
    await wait_until(lambda: b.is_leader and b.on_change.seen, timeout=TAKEOVER_BOUND_SEC + 10,  # type: ignore[union-attr]
                     interval=0.01)
    # timed from the events: the termination to b's own report that it leads (not this loop's polling)
    took = b.on_change.at[0] - killed_at  # type: ignore[union-attr]
    assert took <= TAKEOVER_BOUND_SEC, f"b led {took:.3f}s after a's session ended (bound {TAKEOVER_BOUND_SEC:.2f}s)"
    assert a.on_change.seen == [True, False]  # type: ignore[union-attr]
    assert b.on_change.seen == [True]  # type: ignore[union-attr]
    assert await _holders(db) == [b.backend_pid]
    print(f"takeover after pg_terminate_backend: {took:.3f}s (bound {TAKEOVER_BOUND_SEC:.2f}s)")

    # a reconnects and campaigns again, as a follower.
    await wait_until(lambda: a.backend_pid is not None and a.running, timeout=5)
    assert not a.is_leader

    await b.stop()  # a clean stop releases the lock: a takes it on its next try
    await wait_until(lambda: a.is_leader, timeout=TAKEOVER_BOUND_SEC)
    assert await _holders(db) == [a.backend_pid]


class StallingConnection(GuardedConnection):
    """A connection whose replies stop arriving once `stalled` is set, as on a half-open link."""

    stalled = asyncio.Event()

    async def fetchval(self, *args, **kwargs):
        if StallingConnection.stalled.is_set():
            await asyncio.Future()  # the reply that never comes
        return await super().fetchval(*args, **kwargs)


async def test_a_leader_whose_probe_gets_no_answer_steps_down(db, electors):
    StallingConnection.stalled = asyncio.Event()
    a = electors("node-a", connect_fn=functools.partial(connect, connection_class=StallingConnection))
    await a.start()
    await wait_until(lambda: a.is_leader, timeout=5)
    StallingConnection.stalled.set()
    loop = asyncio.get_running_loop()
    stalled_at = loop.time()
    # One period until the next probe, then the probe timeout (1 s here).
    await wait_until(lambda: not a.is_leader, timeout=RETRY_SEC * 1.1 + 1.0 + 1.0, interval=0.01)
    assert loop.time() - stalled_at >= 1.0 - 0.05  # it waited for the probe, not less
    assert a.on_change.seen == [True, False]  # type: ignore[union-attr]
    assert "TimeoutError" in (a.last_error or "")
    StallingConnection.stalled.clear()
    await wait_until(lambda: a.is_leader, timeout=5)  # the next connection works, and leads again
    assert await _holders(db) == [a.backend_pid]  # the stalled session was ended, its lock with it


async def test_the_supervisor_stops_leader_duties_on_the_node_that_lost_the_lock(dsn, db):
    recorder = Recorder()
    nodes = []
    for name in ("n1", "n2"):
        elector = LeaderElector(dsn, LeaderSettings(retry_sec=RETRY_SEC, probe_timeout_sec=1.0), node_name=name)
        duty = Steady(f"duty_{name}", recorder, scope=Scope.LEADER)
        nodes.append((Supervisor([duty], elector=elector), elector, duty))
    try:
        for supervisor, _, _ in nodes:
            await supervisor.start()
        await wait_until(lambda: sum(e.is_leader for _, e, _ in nodes) == 1, timeout=5)
        (s1, e1, d1), (s2, _e2, d2) = sorted(nodes, key=lambda n: not n[1].is_leader)
        await wait_until(lambda: d1.running, timeout=5)
        assert not d2.running and s2.leading is False
        assert await db.fetchval("SELECT pg_terminate_backend($1)", e1.backend_pid)
        await wait_until(lambda: d2.running, timeout=TAKEOVER_BOUND_SEC)
        assert not d1.running, "the old leader's duty outlived its lock"
        assert [s.state.value for s in s1.status()] == ["running", "standby"]
        assert [s.state.value for s in s2.status()] == ["running", "running"]
        # never both at once: the old duty stopped before the new one started
        assert recorder.events.index(f"stop {d1.name}") < recorder.events.index(f"start {d2.name}")
    finally:
        for supervisor, _, _ in nodes:
            await supervisor.stop()
    # The session ends on the server a moment after the client closed it; then the lock is free.
    await wait_until(lambda: _no_holder(db), timeout=5)


async def _no_holder(db: asyncpg.Pool) -> bool:
    return await _holders(db) == []
