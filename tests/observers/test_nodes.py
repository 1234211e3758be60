"""The node registry (issue 12 item 1): every running App registers an incarnation, heartbeats and
deregisters on a clean stop; a silent node is marked dead by another with a compare-and-set and its
observers are released without using their retry budget; a same-name start supersedes the old
incarnation so exactly one is live."""

from __future__ import annotations

import uuid

from dataloader.storage.observer_repository import NodeRepository
from tests.conftest import wait_until

DSN_ARGS = "dsn"


async def live_rows(pool, name):
    return await pool.fetch("SELECT * FROM dl_nodes WHERE name = $1 AND state = 'live'", name)


async def test_a_running_app_registers_heartbeats_and_deregisters(odb, make_app):
    app = make_app("node-a", observer_capacity=7)
    async with app:
        async with app.running():
            await wait_until(lambda: live_rows(odb, "node-a"), timeout=10, message="node-a registered")
            first = (await live_rows(odb, "node-a"))[0]
            await wait_until(lambda: _beat_after(odb, first["node_id"], first["heartbeat_at"]), timeout=5,
                             message="a heartbeat")
            nodes = await app.observers.nodes()
            assert [(n.name, n.state, n.capacity, n.queues, n.running) for n in nodes] == [
                ("node-a", "live", 7, ["obs-unused"], 0)]
            assert nodes[0].pid > 0 and nodes[0].version and "test.probe" in nodes[0].kinds
        row = await odb.fetchrow("SELECT state, stopped_at FROM dl_nodes WHERE node_id = $1", first["node_id"])
        assert row["state"] == "stopped" and row["stopped_at"] is not None
        assert await app.observers.nodes() == []
        assert [n.state for n in await app.observers.nodes(include_ended=True)] == ["stopped"]


async def _beat_after(pool, node_id, at):
    return await pool.fetchval("SELECT heartbeat_at > $2 FROM dl_nodes WHERE node_id = $1", node_id, at)


async def test_same_name_start_supersedes_and_the_silent_incarnation_dies_once(odb):
    repo = NodeRepository(odb)
    old, new, other = uuid.uuid4(), uuid.uuid4(), uuid.uuid4()
    await repo.register(old, "svc-1", "h", 1, "v", 4, [], ["test.probe"])
    await repo.register(other, "svc-2", "h", 2, "v", 4, [], ["test.probe"])
    row = await repo.register(new, "svc-1", "h", 3, "v", 4, [], ["test.probe"])
    assert row["superseded"] == 1
    states = dict(await odb.fetch("SELECT node_id, state FROM dl_nodes"))
    assert states == {old: "superseded", new: "live", other: "live"}
    assert [n.node_id for n in await repo.list() if n.name == "svc-1" and n.state == "live"] == [new]
    # the superseded incarnation cannot heartbeat any more: it learns it must stop its observers
    assert (await repo.heartbeat(old, 60, []))["alive"] == 0
    # silent for longer than the bound: the next heartbeat of any node marks it dead, once
    await odb.execute("UPDATE dl_nodes SET heartbeat_at = now() - interval '1 minute' WHERE node_id = $1", old)
    beats = [await repo.heartbeat(other, 30, []), await repo.heartbeat(new, 30, [])]
    assert [list(b["dead_nodes"]) for b in beats] == [["svc-1"], []]
    assert dict(await odb.fetch("SELECT node_id, state FROM dl_nodes"))[old] == "dead"
    assert (await repo.deregister(new))["stopped"] == 1


async def test_a_dead_node_releases_its_observers_without_using_their_budget(odb, make_app, dsn):
    repo = NodeRepository(odb)
    ghost = uuid.uuid4()
    await repo.register(ghost, "ghost", "h", 1, "v", 4, [], ["test.probe"])
    await odb.execute(
        "INSERT INTO dl_observers (name, kind, args, state, node_id, epoch, failures, max_restarts) "
        "VALUES ('watch-1', 'test.probe', $1::jsonb, 'processing', $2, 5, 0, 0)",
        f'{{"dsn": "{dsn}"}}', ghost)
    await odb.execute("UPDATE dl_nodes SET heartbeat_at = now() - interval '1 hour' WHERE node_id = $1", ghost)
    app = make_app("survivor")
    async with app, app.running():
        moved = await wait_until(lambda: _running_on(app, "watch-1", "survivor"), timeout=10,
                                 message="watch-1 moved to the survivor")
        assert moved.failures == 0 and moved.moves == 1 and moved.epoch == 6
        assert moved.state.value == "processing"
        ghost_row = await odb.fetchrow("SELECT state FROM dl_nodes WHERE node_id = $1", ghost)
        assert ghost_row["state"] == "dead"
        await app.observers.stop("watch-1", wait=10)


async def _running_on(app, name, node):
    observer = await app.observers.get(name)
    return observer if observer.node == node and observer.state.value == "processing" else None


def test_the_quiet_pace_is_half_the_fence_when_that_at_least_halves_the_cost():
    from dataloader.observers.node_registry import NodeSettings

    defaults = NodeSettings(capacity=1)
    assert (defaults.heartbeat_sec, defaults.fence_after, defaults.quiet_sec) == (2, 10, 5)
    assert NodeSettings(capacity=1, heartbeat_sec=2, dead_after_sec=9, stop_grace_sec=3).quiet_sec is None


async def test_an_idle_cluster_beats_at_the_quiet_pace_until_an_observer_appears(odb, make_app, dsn):
    """No observer anywhere: the heartbeat only keeps the node list, so it slows to the quiet pace.
    A created observer's NOTIFY brings the fast pace back before the node claims it."""
    app = make_app("quiet-a")
    async with app, app.running() as manager:
        node = next(s for s in manager.supervisor.services if s.name == "node_heartbeat")
        quiet = node.settings.quiet_sec
        assert quiet is not None and quiet > node.settings.heartbeat_sec
        await wait_until(lambda: node._beat_period() == quiet, timeout=10, message="the quiet pace")
        await app.observers.create(app.observers.spec(name="wakes-the-pace", kind="test.probe",
                                                      args={"dsn": dsn, "tick_sec": 0.05}))
        await wait_until(lambda: "wakes-the-pace" in node.runner.running, timeout=10, message="the claim")
        assert node._beat_period() == node.settings.heartbeat_sec
        await app.observers.stop("wakes-the-pace", wait=10)
        await wait_until(lambda: node._beat_period() == quiet, timeout=10, message="quiet again")
