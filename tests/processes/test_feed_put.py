"""The event feed (durable, ordered, resumable; never a rolled-back row, never a skipped late
commit; SSE), put (import a whole process) and the process metrics."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import httpx
import pytest

from dataloader import App, ProcessExists, SetTimer
from dataloader.api import create_app
from dataloader.exceptions import InvalidCursor, InvalidProcessRequest, ProcessTaskFailed
from tests.conftest import wait_until
from tests.processes.conftest import process_settings
from tests.processes.processors import register


async def read_all(app: App, ns: str, after: str | None = None, limit: int = 3) -> tuple[list, str]:
    """The whole feed after `after`, once no committed row is held back by an older transaction
    still running (a worker's own transaction may be open for a moment after a commit)."""
    await wait_until(lambda: _settled(app, ns), timeout=10)
    items, cursor = [], after
    while True:
        page = await app.processes.feed(ns, after=cursor, limit=limit)
        items += page.items
        if page.cursor == cursor or not page.items:
            return items, page.cursor
        cursor = page.cursor


async def _settled(app: App, ns: str) -> bool:
    return not await app.processes.repo.feed_held_back(ns, 0, 0)


async def test_feed_has_every_event_and_lifecycle_change_in_order_and_resumes_after_a_restart(app, ns, dsn):
    register(ns)
    async with app.running():
        await app.processes.init(ns, "a", {"extra": 1})
        await app.processes.init(ns, "b", {})
        await app.processes.call(ns, "a", {"n": 1})
        with pytest.raises(ProcessTaskFailed):
            await app.processes.call(ns, "b", {"fail": "x"})
        await app.processes.simple_repair(ns, "b")
    items, _ = await read_all(app, ns)
    seen = [(i.process_id, i.kind, i.event_id) for i in items]
    assert seen == [("a", "init", None), ("a", "event", 1), ("a", "event", 2), ("b", "init", None),
                    ("b", "event", 1), ("a", "event", 3), ("b", "error", None), ("b", "repair", None)]
    assert len({i.cursor for i in items}) == len(items)
    middle = items[3].cursor
    # a new App (a restarted node) resumes from a stored cursor: the rest, exactly once
    async with App(process_settings(dsn)) as again, again.running():
        await again.processes.remove(ns, "a")
        rest, _ = await read_all(again, ns, after=middle)
    assert [(i.process_id, i.kind) for i in rest] == [(p, k) for p, k, _ in seen[4:]] + [("a", "remove")]
    # nothing new: the cursor stays
    page = await app.processes.feed(ns, after=rest[-1].cursor)
    assert page.items == [] and page.cursor == rest[-1].cursor
    with pytest.raises(InvalidCursor):
        await app.processes.feed(ns, after="12")


async def test_feed_never_skips_a_late_commit_and_never_shows_a_rollback(app, ns, pdb, dsn):
    register(ns)
    import asyncpg

    slow = await asyncpg.connect(dsn)
    try:
        async with app.running():
            # transaction A writes a feed row (as a step would) and stays open...
            tx = slow.transaction()
            await tx.start()
            await slow.execute("INSERT INTO dl_process_feed (ns, process_id, kind) VALUES ($1, 'late', 'event')", ns)
            # ...while B (a whole init) commits after it
            await app.processes.init(ns, "early", {})
            page = await app.processes.feed(ns)
            assert page.items == [], "B was served while the older A could still commit before it"
            assert page.cursor == "0.0"
            await tx.commit()
            items, _ = await read_all(app, ns)
            assert [(i.process_id, i.kind) for i in items] == [("late", "event"), ("early", "init"),
                                                               ("early", "event")]
            # a rolled-back row is never served
            rolled = slow.transaction()
            await rolled.start()
            await slow.execute("INSERT INTO dl_process_feed (ns, process_id, kind) VALUES ($1, 'ghost', 'event')",
                               ns)
            await rolled.rollback()
            await app.processes.call(ns, "early", {})
            more, _ = await read_all(app, ns, after=items[-1].cursor)
            assert [i.process_id for i in more] == ["early"]
    finally:
        await slow.close()


async def test_follow_and_sse_stream(app, ns):
    register(ns)
    async with app.running():
        await app.processes.init(ns, "s1", {})
        stop = asyncio.Event()
        got = []

        async def consume() -> None:
            async for item in app.processes.follow(ns, stop=stop):
                got.append(item)

        follower = asyncio.create_task(consume())
        await wait_until(lambda: len(got) == 2, timeout=10)
        await app.processes.call(ns, "s1", {})
        await wait_until(lambda: len(got) == 3, timeout=10)
        stop.set()
        await asyncio.wait_for(follower, 15)
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=create_app(app.settings, context=app)),
                                     base_url="http://t") as client:
            response = await client.get(f"/api/v1/processes/{ns}/events/stream",
                                        params={"max_sec": 1}, headers={"Last-Event-ID": got[0].cursor})
            assert response.status_code == 200
            assert response.headers["content-type"].startswith("text/event-stream")
            ids = [line[4:] for line in response.text.splitlines() if line.startswith("id: ")]
            assert ids == [got[1].cursor, got[2].cursor]
            assert "event: event" in response.text
            page = (await client.get(f"/api/v1/processes/{ns}/events", params={"limit": 2})).json()
            assert [i["cursor"] for i in page["items"]] == [got[0].cursor, got[1].cursor]
            assert page["cursor"] == got[1].cursor
            bad = await client.get(f"/api/v1/processes/{ns}/events", params={"after": "x"})
            assert bad.status_code == 422
            unknown = await client.get("/api/v1/processes/nobody/events/stream")
            assert unknown.status_code == 404


async def test_put_imports_a_process_with_history_and_timers(app, ns, pdb):
    register(ns)
    history = [{"payload": {"kind": "old", "i": i}, "timestamp": "2020-01-01T00:00:00+00:00"} for i in range(3)]
    async with app.running():
        plain = await app.processes.put(ns, {"id": "m1", "aux_state": {"x": 1}, "history": history})
        assert plain.last_event_id == 3 and plain.timer is None and plain.status.value == "running"
        assert (await app.processes.call(ns, "m1", {}))["history"] == 3
        timed = await app.processes.put(ns, {"id": "m2", "history": history}, SetTimer(after=0.2))
        assert timed.timer is not None
        await app.processes.put(ns, {"id": "m3"}, SetTimer(at=datetime.now(UTC) + timedelta(seconds=0.2), remove=True))

        async def fired() -> bool:
            kinds = [e.payload["kind"] for e in (await app.processes.get(ns, "m2")).history]
            return kinds[-1] == "timeout"

        await wait_until(fired, timeout=15)
        await wait_until(lambda: _count(pdb, ns, "m3", 0), timeout=15)
    with pytest.raises(ProcessExists):
        await app.processes.put(ns, {"id": "m1"})
    for bad in ({"id": "x", "history": [{"payload": 1, "event_id": 2}, {"payload": 2, "event_id": 2}]},
                {"id": "x", "status": "weird"}, {"id": "x", "history": [{"nopayload": 1}]},
                {"id": "x", "unknown": 1}, {"id": "x", "history": [{"payload": 1, "timestamp": "yesterday"}]}):
        with pytest.raises(InvalidProcessRequest):
            await app.processes.put(ns, bad)
    with pytest.raises(InvalidProcessRequest):
        await app.processes.put(ns, {"id": "x", "status": "error"}, SetTimer(after=1))
    assert await pdb.fetchval("SELECT count(*) FROM dl_processes WHERE id = 'x'") == 0


async def _count(pdb, ns: str, pid: str, expected: int) -> bool:
    return await pdb.fetchval("SELECT count(*) FROM dl_processes WHERE ns = $1 AND id = $2", ns, pid) == expected


async def test_http_put_and_metrics(app, ns):
    register(ns)
    async with app.running(), httpx.AsyncClient(
            transport=httpx.ASGITransport(app=create_app(app.settings, context=app)), base_url="http://t") as client:
        created = await client.put(f"/api/v1/processes/{ns}/h1", json={
            "aux_state": {"a": 1}, "history": [{"payload": {"kind": "x"}}],
            "timer": {"type": "timeout", "at": "2030-01-01T00:00:00Z"}})
        assert created.status_code == 201, created.text
        assert created.json()["timer"]["type"] == "timeout" and created.json()["last_event_id"] == 1
        again = await client.put(f"/api/v1/processes/{ns}/h1", json={})
        assert again.status_code == 409 and again.json()["error"] == "process_exists"
        bad = await client.put(f"/api/v1/processes/{ns}/h2", json={"history": [{"payload": "\u0000"}]})
        assert bad.status_code == 422
        text = (await client.get("/metrics")).text
        assert f'dl_processes{{ns="{ns}",status="running"}} 1.0' in text
        assert "dl_process_request_preparing_duration_seconds" in text
