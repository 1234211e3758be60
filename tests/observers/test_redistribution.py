"""Issue 12's cluster test with real processes: three `dataloader worker` nodes, capacity 12 each,
30 probe observers. kill -9 one node: the two survivors fill up to their capacity (24) within the
dead bound + a heartbeat + a claim, the 6 left wait in `created` (2 × 12 < 30: the issue's "all 30
on the two survivors" cannot fit; see docs/observers.md), and a node restarted under the killed
one's name — one live incarnation in the registry — takes them: all running again. An observer
stopped by name while its node is dead ends `deleted` and never starts again. Throughout, each
probe's advisory lock on its own connection proves no two copies ran at once, and the probe
connections per node (what really runs, not what the table says) never exceed 12. A second test
takes the issue's wording literally with capacity 15: all 30 run again on the two survivors."""

from __future__ import annotations

import asyncio
import signal

from dataloader.observers import ObserverState
from tests.conftest import wait_until

CAPACITY = 12
OBSERVERS = 30
# The bound docs/observers.md states: an observer of a node killed with -9 runs again on a live node
# with spare capacity within DL_NODE_DEAD_AFTER_SEC + DL_NODE_HEARTBEAT_SEC plus a claim (one NOTIFY
# round trip and a statement). It is measured from the database's own stamps, not from this test's
# wall clock around subprocess calls (which a loaded 2-core machine stretches): from the dead node's
# last heartbeat (dl_nodes.heartbeat_at) to the moment a survivor claimed each moved observer
# (dl_observers.started_at); the part after the node was marked dead (dl_nodes.stopped_at) is the claim.
DEAD_AFTER_SEC, HEARTBEAT_SEC = 5, 0.5
CLAIM_SEC = 1.0  # a NOTIFY round trip and a statement, with room for a loaded CI machine
BOUND_SEC = DEAD_AFTER_SEC + HEARTBEAT_SEC + CLAIM_SEC
NODE_SETTINGS = {"node_heartbeat_sec": HEARTBEAT_SEC, "node_dead_after_sec": DEAD_AFTER_SEC,
                 "observer_stop_grace_sec": 1, "observer_capacity": CAPACITY, "retention_enabled": "false",
                 "stats_enabled": "false",
                 "pipeline_modules": "tests.support.pipelines,tests.support.observers"}


async def running_by_node(pool) -> dict[str, int]:
    rows = await pool.fetch("SELECT application_name, count(*) FROM pg_stat_activity "
                            "WHERE datname = current_database() AND application_name LIKE 'probe:%' "
                            "GROUP BY application_name")
    return {r[0].removeprefix("probe:"): r[1] for r in rows}


async def processing(pool) -> int:
    return await pool.fetchval("SELECT count(*) FROM dl_observers WHERE state = 'processing'")


async def test_kill_9_moves_observers_within_the_bound_never_two_copies_capacity_kept(odb, workers, dsn):
    from dataloader import App, Settings
    from tests.observers.conftest import node_settings  # noqa: F401  (kinds registered in this process)

    app = App(Settings(db_dsn=dsn, observer_capacity=0))
    await app.open()
    peak: dict[str, int] = {}
    sampling = True

    async def sample() -> None:
        while sampling:
            for node, count in (await running_by_node(odb)).items():
                peak[node] = max(peak.get(node, 0), count)
            await asyncio.sleep(0.05)

    sampler = asyncio.create_task(sample())
    try:
        nodes = {name: workers(queues={"obs-unused": 1}, node_name=name, **NODE_SETTINGS)
                 for name in ("n1", "n2", "n3")}
        await asyncio.gather(*(n.wait_ready() for n in nodes.values()))
        api = app.observers
        for i in range(OBSERVERS):
            await api.create(api.spec(name=f"pair-{i:02d}", kind="test.probe", args={"dsn": dsn, "tick_sec": 0.2}))
        await wait_until(lambda: _all_started(odb, OBSERVERS), timeout=60, interval=0.1, message="30 probes started")
        load = {n.name: n.running for n in await api.nodes()}
        assert sum(load.values()) == OBSERVERS and max(load.values()) <= CAPACITY, load

        victim = max(load, key=load.get)
        on_victim = [o.name for o in await api.list(node=victim)]
        nodes[victim].signal(signal.SIGKILL)
        await nodes[victim].wait_exit()
        # stop one of the victim's observers while it has no live node: it must end deleted, never back
        doomed = on_victim[0]
        asked = await api.stop(doomed)
        assert asked.state is ObserverState.ON_DELETING

        await wait_until(lambda: _processing_is(odb, 2 * CAPACITY), timeout=30, interval=0.05,
                         message="the survivors full")
        await _assert_moved_within_the_bound(odb, victim, on_victim)
        await wait_until(lambda: _state_is(api, doomed, ObserverState.DELETED), timeout=10)
        waiting = await api.list(state="created")
        assert len(waiting) == OBSERVERS - 1 - 2 * CAPACITY
        assert all(o.failures == 0 and o.moves == 1 for o in waiting)
        survivors = {n.name: n.running for n in await api.nodes()}
        assert survivors == {name: CAPACITY for name in nodes if name != victim}, survivors

        # the killed node comes back under its name: one live incarnation, and it takes the rest
        nodes[victim] = workers(queues={"obs-unused": 1}, node_name=victim, **NODE_SETTINGS)
        await nodes[victim].wait_ready()
        await wait_until(lambda: _processing_is(odb, OBSERVERS - 1), timeout=30, interval=0.1,
                         message="all but the stopped one running again")
        incarnations = await api.nodes(include_ended=True)
        by_state = sorted(n.state for n in incarnations if n.name == victim)
        assert by_state == ["dead", "live"], by_state
        assert len([n for n in await api.nodes() if n.state == "live"]) == 3

        events = await odb.fetch("SELECT name, kind, at FROM test_observer_events ORDER BY id")
        assert [e for e in events if e["kind"] == "overlap"] == []
        assert [e for e in events if e["name"] == doomed and e["kind"] == "start"][-1]["at"] < \
            (await odb.fetchval("SELECT stop_requested_at FROM dl_observers WHERE name = $1", doomed))
        assert await odb.fetchval("SELECT count(*) FROM dl_observers WHERE failures > 0") == 0
    finally:
        sampling = False
        await sampler
        await app.close()
    assert peak and max(peak.values()) <= CAPACITY, peak


async def _assert_moved_within_the_bound(pool, victim: str, on_victim: list[str]) -> None:
    """Every observer of the killed node that a survivor took (all of them that found room) was
    claimed within the documented bound of the node's last heartbeat, by the database's clock."""
    node = await pool.fetchrow("SELECT heartbeat_at, stopped_at FROM dl_nodes WHERE name = $1 AND state = 'dead'",
                               victim)
    assert node is not None, f"{victim} was never marked dead"
    claimed = await pool.fetch("SELECT name, started_at FROM dl_observers "
                               "WHERE name = ANY($1) AND state = 'processing'", on_victim)
    assert claimed, "no observer of the killed node runs again"
    detected = (node["stopped_at"] - node["heartbeat_at"]).total_seconds()
    moved = max((r["started_at"] - node["heartbeat_at"]).total_seconds() for r in claimed)
    print(f"{len(claimed)} observers moved {moved:.3f}s after {victim}'s last heartbeat (marked dead after "
          f"{detected:.3f}s; bound {BOUND_SEC:.2f}s)")
    assert moved <= BOUND_SEC, f"moved {moved:.3f}s after the last heartbeat (bound {BOUND_SEC:.2f}s)"


async def _all_started(pool, n):
    return await pool.fetchval("SELECT count(DISTINCT name) FROM test_observer_events WHERE kind = 'start'") == n


async def _processing_is(pool, n):
    return await processing(pool) == n


async def _state_is(api, name, state):
    return (await api.get(name)).state is state


async def test_with_room_on_the_survivors_all_30_run_again_on_them(odb, workers, dsn):
    """The issue's wording taken literally needs 2 × capacity ≥ 30: with capacity 15 every one of
    the 30 runs again on the two survivors within the bound, with no overlap."""
    from dataloader import App, Settings

    settings = {**NODE_SETTINGS, "observer_capacity": 15}
    app = App(Settings(db_dsn=dsn, observer_capacity=0))
    await app.open()
    try:
        nodes = {name: workers(queues={"obs-unused": 1}, node_name=name, **settings) for name in ("m1", "m2", "m3")}
        await asyncio.gather(*(n.wait_ready() for n in nodes.values()))
        api = app.observers
        for i in range(OBSERVERS):
            await api.create(api.spec(name=f"pair-{i:02d}", kind="test.probe", args={"dsn": dsn, "tick_sec": 0.2}))
        await wait_until(lambda: _all_started(odb, OBSERVERS), timeout=60, interval=0.1, message="30 probes started")
        load = {n.name: n.running for n in await api.nodes()}
        victim = max(load, key=load.get)
        on_victim = [o.name for o in await api.list(node=victim)]
        nodes[victim].signal(signal.SIGKILL)
        await nodes[victim].wait_exit()
        await wait_until(lambda: _all_on(api, {n for n in nodes if n != victim}, OBSERVERS), timeout=30,
                         interval=0.05, message="all 30 on the survivors")
        await _assert_moved_within_the_bound(odb, victim, on_victim)
        await wait_until(lambda: _probes_total(odb, OBSERVERS), timeout=10, message="30 probe connections")
        running = await running_by_node(odb)
        assert victim not in running and max(running.values()) <= 15, running
        assert await odb.fetchval("SELECT count(*) FROM test_observer_events WHERE kind = 'overlap'") == 0
    finally:
        await app.close()


async def _all_on(api, names, n):
    observers = await api.list(state="processing")
    return len(observers) == n and {o.node for o in observers} <= names


async def _probes_total(pool, n):
    return sum((await running_by_node(pool)).values()) == n
