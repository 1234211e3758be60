"""Observers in one process (issue 12 item 2): create by unique name (409 on a live duplicate),
list with node and state, stop by name (confirmed `deleted`, never back), capacity (the rest wait
in `created` until a place frees), crash restarts with backoff and a visible reason, the retry
budget (`failed`), a sync observer in its thread, a stop that must cancel, a clean node stop
handing observers to another node at once, and the feed follower resuming from its saved
position after a move."""

from __future__ import annotations

import itertools

import pytest

from dataloader.exceptions import InvalidObserverRequest, ObserverExists, ObserverNotFound
from dataloader.observers import ObserverState
from tests.conftest import wait_until


async def starts(pool, name=None):
    if name is None:
        return await pool.fetchval("SELECT count(*) FROM test_observer_events WHERE kind = 'start'")
    return await pool.fetchval("SELECT count(*) FROM test_observer_events WHERE kind = 'start' AND name = $1", name)


async def _starts_at_least(pool, n):
    return await starts(pool) >= n


async def overlaps(pool):
    return await pool.fetchval("SELECT count(*) FROM test_observer_events WHERE kind = 'overlap'")


async def states(app):
    return {o.name: o.state.value for o in await app.observers.list()}


async def test_create_list_stop_lifecycle(odb, make_app, dsn):
    app = make_app("solo")
    async with app, app.running():
        api = app.observers
        created = await api.create(api.spec(name="btc-usdt", kind="test.probe", args={"dsn": dsn, "tick_sec": 0.05}))
        assert created.state is ObserverState.CREATED and created.node is None and created.epoch == 0
        with pytest.raises(ObserverExists):
            await api.create(api.spec(name="btc-usdt", kind="test.probe", args={"dsn": dsn}))
        await wait_until(lambda: starts(odb, "btc-usdt"), timeout=10, message="probe started")
        running = await api.get("btc-usdt")
        assert (running.state, running.node, running.epoch) == (ObserverState.PROCESSING, "solo", 1)
        assert [o.name for o in await api.list(state="processing", node="solo")] == ["btc-usdt"]
        assert (await api.nodes())[0].running == 1

        stopped = await api.stop("btc-usdt", wait=10)
        assert stopped.state is ObserverState.DELETED and stopped.node is None and stopped.reason == "stopped"
        events = [r["kind"] for r in await odb.fetch(
            "SELECT kind FROM test_observer_events WHERE name = 'btc-usdt' ORDER BY id")]
        assert events == ["start", "stop"]  # it returned by itself: a cooperative stop
        assert (await api.stop("btc-usdt")).state is ObserverState.DELETED  # repeating changes nothing
        await _quiet_for(odb, app, 1.0)
        assert await starts(odb, "btc-usdt") == 1  # never back
        # a deleted name can be created afresh; the fencing epoch keeps counting
        again = await api.create(api.spec(name="btc-usdt", kind="test.probe", args={"dsn": dsn}))
        assert again.state is ObserverState.CREATED
        await wait_until(lambda: _state_is(api, "btc-usdt", ObserverState.PROCESSING), timeout=10)
        assert (await api.get("btc-usdt")).epoch == 2
        await api.stop("btc-usdt", wait=10)


async def test_bad_requests_write_nothing(odb, make_app):
    app = make_app("solo")
    async with app:
        api = app.observers
        for fields in ({"name": "x", "kind": "no.such.kind"}, {"name": "bad name", "kind": "test.probe"},
                       {"name": "", "kind": "test.probe"}, {"name": "x", "kind": "test.probe", "args": {"a": "\x00"}},
                       {"name": "x", "kind": "test.probe", "max_restarts": -1},
                       {"name": "x", "kind": "test.probe", "nonsense": 1}):
            with pytest.raises(InvalidObserverRequest):
                await api.create(api.spec(**fields))
        with pytest.raises(ObserverNotFound):
            await api.stop("nobody")
        with pytest.raises(InvalidObserverRequest):
            await api.list(state="sleeping")
        assert await api.list() == []


async def test_capacity_is_never_exceeded_and_waiting_observers_start_when_a_place_frees(odb, make_app, dsn):
    app = make_app("small", observer_capacity=2)
    async with app, app.running():
        api = app.observers
        for i in range(5):
            await api.create(api.spec(name=f"w{i}", kind="test.probe", args={"dsn": dsn, "tick_sec": 0.05}))
        await wait_until(lambda: _count_state(api, "processing", 2), timeout=10, message="2 running")
        await _quiet_for(odb, app, 1.0)
        current = await states(app)
        assert sorted(current.values()) == ["created"] * 3 + ["processing"] * 2, current
        assert (await api.nodes())[0].running == 2
        first = next(name for name, state in current.items() if state == "processing")
        await api.stop(first, wait=10)
        await wait_until(lambda: _count_state(api, "processing", 2), timeout=10, message="a waiting one took the place")
        # `processing` comes before the probe's `start` row (the probe connects first): wait for the row
        await wait_until(lambda: _starts_at_least(odb, 3), timeout=10, message="the waiting one's start")
        assert await starts(odb) == 3
        assert await overlaps(odb) == 0


async def test_a_crashing_observer_restarts_with_backoff_then_fails_after_its_budget(odb, make_app, dsn):
    app = make_app("solo")
    async with app, app.running():
        api = app.observers
        await api.create(api.spec(name="crashy", kind="test.crash", args={"dsn": dsn}, max_restarts=3))
        failed = await wait_until(lambda: _state_is(api, "crashy", ObserverState.FAILED), timeout=20,
                                  message="crashy failed")
        assert failed.failures == 4 and "RuntimeError: boom" in failed.last_error
        assert "gave up" in failed.reason and failed.node is None
        times = [r["at"] for r in await odb.fetch(
            "SELECT at FROM test_observer_events WHERE name = 'crashy' AND kind = 'start' ORDER BY id")]
        assert len(times) == 4  # the first run and 3 restarts
        gaps = [(b - a).total_seconds() for a, b in itertools.pairwise(times)]
        # backoff 0.2, 0.4, 0.8 s (doubling, capped at 1 s): each gap at least its delay
        assert all(gap >= delay for gap, delay in zip(gaps, (0.2, 0.4, 0.8), strict=True)), gaps
        # a failed observer can be stopped (deleted), and then created afresh
        assert (await api.stop("crashy")).state is ObserverState.DELETED


async def test_a_restarting_observer_shows_why(odb, make_app, dsn):
    app = make_app("solo", observer_restart_backoff_sec=30, observer_restart_backoff_max_sec=30)
    async with app, app.running():
        api = app.observers
        await api.create(api.spec(name="crashy", kind="test.crash", args={"dsn": dsn}))
        waiting = await wait_until(lambda: _crashed_once(api, "crashy"), timeout=10, message="crash recorded")
        assert waiting.state is ObserverState.CREATED and waiting.failures == 1
        assert waiting.reason.startswith("crashed (1 in a row); restarting after 30")
        assert (await api.stop("crashy")).state is ObserverState.DELETED


async def test_sync_observer_runs_in_a_thread_and_stops(odb, make_app):
    app = make_app("solo")
    async with app, app.running():
        api = app.observers
        await api.create(api.spec(name="threaded", kind="test.sync"))
        reported = await wait_until(lambda: _status_of(api, "threaded"), timeout=10, message="sync status")
        assert reported == {"thread": True}
        assert (await api.stop("threaded", wait=10)).state is ObserverState.DELETED


async def test_a_stubborn_observer_is_cancelled_after_the_grace_period(odb, make_app):
    app = make_app("solo")
    async with app, app.running():
        api = app.observers
        await api.create(api.spec(name="stubborn", kind="test.stubborn"))
        await wait_until(lambda: _state_is(api, "stubborn", ObserverState.PROCESSING), timeout=10)
        stopped = await api.stop("stubborn", wait=10)
        assert stopped.state is ObserverState.DELETED


async def test_a_clean_node_stop_hands_its_observers_over_and_the_feed_resumes_where_it_was(odb, make_app, dsn):
    await odb.execute("INSERT INTO test_feed SELECT g, 'item ' || g FROM generate_series(1, 50) g")
    first, second = make_app("first"), make_app("second", observer_capacity=0)
    async with first, second:
        async with second.running():
            async with first.running():
                api = first.observers
                await api.create(api.spec(name="feed", kind="test.feed", args={"dsn": dsn}))
                await wait_until(lambda: _checkpoint_is(api, "feed", {"seq": 50}), timeout=10, message="feed read")
            # first stopped cleanly: feed is waiting for a live node with spare capacity
            handed = await second.observers.get("feed")
            assert handed.state is ObserverState.CREATED and handed.moves == 1 and handed.failures == 0
            assert handed.reason == "node first stopped; waiting for a live node"
            await odb.execute("INSERT INTO test_feed SELECT g, 'item ' || g FROM generate_series(51, 80) g")
            async with first.running():  # a new incarnation of "first" takes it back
                await wait_until(lambda: _checkpoint_is(api, "feed", {"seq": 80}), timeout=10, message="feed resumed")
                seen = await odb.fetch("SELECT seq, node FROM test_feed_seen WHERE observer = 'feed' ORDER BY seq")
                assert [r["seq"] for r in seen] == list(range(1, 81))
                assert (await api.get("feed")).epoch == 2
                await api.stop("feed", wait=10)
    # Every read, not just the de-duplicated rows: the first run read from 0 up to 50; the resumed
    # run (epoch 2) started after the saved position 50 and never re-read anything; each seq was
    # read exactly once in all.
    reads = await odb.fetch("SELECT epoch, after_seq, seqs FROM test_feed_reads WHERE observer = 'feed' ORDER BY id")
    first_run = [r for r in reads if r["epoch"] == 1]
    resumed = [r for r in reads if r["epoch"] == 2]
    assert first_run and resumed and len(first_run) + len(resumed) == len(reads)
    assert first_run[0]["after_seq"] == 0 and max(s for r in first_run for s in r["seqs"]) == 50
    assert resumed[0]["after_seq"] == 50, [(r["after_seq"], r["seqs"][:3]) for r in resumed]
    assert min(s for r in resumed for s in r["seqs"]) == 51
    assert sorted(s for r in reads for s in r["seqs"]) == list(range(1, 81))


async def _state_is(api, name, state):
    observer = await api.get(name)
    return observer if observer.state is state else None


async def _crashed_once(api, name):
    observer = await api.get(name)
    return observer if observer.failures >= 1 and observer.state is ObserverState.CREATED else None


async def _status_of(api, name):
    return (await api.get(name)).status


async def _checkpoint_is(api, name, checkpoint):
    return (await api.get(name)).checkpoint == checkpoint


async def _count_state(api, state, n):
    return len(await api.list(state=state)) == n


async def _quiet_for(pool, app, seconds):
    """Let `seconds` pass with the node running (heartbeats and claims happen meanwhile)."""
    import asyncio

    await asyncio.sleep(seconds)


async def test_one_observer_crashing_or_hanging_does_not_touch_the_others(odb, make_app, dsn):
    app = make_app("solo")
    async with app, app.running():
        api = app.observers
        await api.create(api.spec(name="steady", kind="test.probe", args={"dsn": dsn, "tick_sec": 0.05,
                                                                           "save": True}))
        await api.create(api.spec(name="crashy", kind="test.crash", args={"dsn": dsn}))
        await api.create(api.spec(name="stubborn", kind="test.stubborn"))
        await wait_until(lambda: _failures_at_least(api, "crashy", 3), timeout=20, message="3 crashes")
        steady = await api.get("steady")
        assert (steady.state, steady.epoch, steady.failures) == (ObserverState.PROCESSING, 1, 0)
        ticks = steady.checkpoint["ticks"]
        await wait_until(lambda: _ticks_above(api, "steady", ticks), timeout=5, message="steady keeps working")
        assert await starts(odb, "steady") == 1
        assert (await api.get("stubborn")).state is ObserverState.PROCESSING


async def _failures_at_least(api, name, n):
    return (await api.get(name)).failures >= n


async def _ticks_above(api, name, ticks):
    return (await api.get(name)).checkpoint["ticks"] > ticks


async def test_an_observer_run_is_a_span_ended_when_it_stops(odb, make_app, dsn, spans):
    """Issue 23: one span per run on a node, with the observer's name, kind, epoch and how it ended."""
    app = make_app("solo")
    async with app, app.running():
        api = app.observers
        await api.create(api.spec(name="traced", kind="test.probe", args={"dsn": dsn, "tick_sec": 0.05}))
        await wait_until(lambda: starts(odb, "traced"), timeout=10, message="probe started")
        assert (await api.stop("traced", wait=10)).state is ObserverState.DELETED
    (run,) = [s for s in spans.get_finished_spans() if s.name == "observe test.probe"]
    assert run.parent is None  # a trace of its own
    assert dict(run.attributes) == {"dataloader.observer.name": "traced", "dataloader.observer.kind": "test.probe",
                                    "dataloader.observer.epoch": 1, "dataloader.observer.moves": 0,
                                    "dataloader.observer.end": "stop"}  # the stop reason
