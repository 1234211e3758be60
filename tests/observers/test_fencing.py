"""Self-fencing: a node cut off from the database (its role can no longer log in and its sessions
are terminated — a partition as the database sees it, while the node process runs on) stops its
observers before any other node may take them. The probe's lock connection belongs to another
role and stays up through the partition, so a copy that kept running would make the survivor's
copy record an overlap. When the node reaches the database again it finds itself dead and comes
back as a new incarnation.

The second test cuts the node off silently: its connections go through a proxy that stops
forwarding (tests/support/wire.py), so its statements hang with no error at all, as when packets
are dropped. Only the node's own clock (self-fencing by time) can stop its copy in time."""

from __future__ import annotations

import asyncio
import uuid
from urllib.parse import urlsplit, urlunsplit

import pytest

from dataloader.observers import ObserverState
from tests.conftest import wait_until
from tests.support.wire import CountingProxy


def as_role(dsn: str, role: str) -> str:
    parts = urlsplit(dsn)
    host = parts.netloc.rsplit("@", 1)[-1]
    return urlunsplit((parts.scheme, f"{role}@{host}", parts.path, parts.query, parts.fragment))


@pytest.fixture
async def node_role(odb):
    role = f"obs_fence_{uuid.uuid4().hex[:8]}"
    database = await odb.fetchval("SELECT current_database()")
    await odb.execute(f"CREATE ROLE {role} LOGIN")
    await odb.execute(f'GRANT CONNECT ON DATABASE "{database}" TO {role}')
    await odb.execute(f"GRANT USAGE ON SCHEMA public TO {role}")
    await odb.execute(f"GRANT ALL ON ALL TABLES IN SCHEMA public TO {role}")
    await odb.execute(f"GRANT ALL ON ALL SEQUENCES IN SCHEMA public TO {role}")
    yield role
    await odb.execute(f"SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = '{role}'")
    await odb.execute(f"DROP OWNED BY {role}")
    await odb.execute(f"DROP ROLE {role}")


async def test_a_cut_off_node_stops_its_observers_before_another_takes_them(odb, make_app, dsn, node_role):
    isolated = make_app("isolated", db_dsn=as_role(dsn, node_role), observer_capacity=1)
    survivor = make_app("survivor", observer_capacity=1)
    async with isolated, survivor:
        async with isolated.running():
            api = survivor.observers
            await api.create(api.spec(name="watch", kind="test.probe", args={"dsn": dsn, "tick_sec": 0.05}))
            await wait_until(lambda: _on(api, "watch", "isolated"), timeout=10, message="watch on isolated")
            async with survivor.running():
                await odb.execute(f"ALTER ROLE {node_role} NOLOGIN")
                await odb.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = $1",
                                  node_role)
                moved = await wait_until(lambda: _on(api, "watch", "survivor"), timeout=15,
                                         message="watch moved to the survivor")
                assert (moved.epoch, moved.failures, moved.moves) == (2, 0, 1)
                # the survivor's copy writes `overlap` first if the cut-off copy still holds the lock
                await wait_until(lambda: _started_on(odb, "watch", "survivor"), timeout=10)
                events = await odb.fetch("SELECT node, kind FROM test_observer_events WHERE name = 'watch' "
                                         "ORDER BY id")
                assert [(e["node"], e["kind"]) for e in events] == [
                    ("isolated", "start"), ("isolated", "stop"), ("survivor", "start")]
                # the way back: the old incarnation is dead, the node registers a new one
                await odb.execute(f"ALTER ROLE {node_role} LOGIN")
                rows = await wait_until(lambda: _incarnations(odb, "isolated", 2), timeout=20,
                                        message="a new incarnation of isolated")
                assert sorted(r["state"] for r in rows) == ["dead", "live"]
                assert (await api.get("watch")).state is ObserverState.PROCESSING
                assert (await api.get("watch")).node == "survivor"
                await api.stop("watch", wait=10)
        await asyncio.sleep(0)


async def test_a_silently_partitioned_node_stops_its_observers_before_another_takes_them(odb, make_app, dsn):
    port = int(await odb.fetchval("SHOW port"))
    async with CountingProxy(dsn, port) as link:
        isolated = make_app("isolated", db_dsn=link.dsn, observer_capacity=1)
        survivor = make_app("survivor", observer_capacity=1)
        async with isolated, survivor:
            async with isolated.running():
                api = survivor.observers
                await api.create(api.spec(name="watch", kind="test.probe", args={"dsn": dsn, "tick_sec": 0.05}))
                await wait_until(lambda: _on(api, "watch", "isolated"), timeout=10, message="watch on isolated")
                async with survivor.running():
                    sent = len(link.statements)
                    link.partition()  # every statement of isolated now hangs; nothing errs
                    try:
                        moved = await wait_until(lambda: _on(api, "watch", "survivor"), timeout=15,
                                                 message="watch moved to the survivor")
                        assert (moved.epoch, moved.failures, moved.moves) == (2, 0, 1)
                        await wait_until(lambda: _started_on(odb, "watch", "survivor"), timeout=10)
                        events = await odb.fetch("SELECT node, kind FROM test_observer_events WHERE name = 'watch' "
                                                 "ORDER BY id")
                        assert [(e["node"], e["kind"]) for e in events] == [
                            ("isolated", "start"), ("isolated", "stop"), ("survivor", "start")]
                        assert len(link.statements) == sent, "a statement of the partitioned node got through"
                    finally:
                        # healed (also when an assertion failed, so the node can shut down): the late
                        # statements land, the node finds itself dead, comes back anew
                        link.heal()
                    rows = await wait_until(lambda: _incarnations(odb, "isolated", 2), timeout=20,
                                            message="a new incarnation of isolated")
                    assert sorted(r["state"] for r in rows) == ["dead", "live"]
                    assert (await api.get("watch")).node == "survivor"
                    assert await odb.fetchval("SELECT count(*) FROM test_observer_events WHERE kind = 'overlap'") == 0
                    await api.stop("watch", wait=10)


async def _on(api, name, node):
    observer = await api.get(name)
    return observer if observer.node == node and observer.state is ObserverState.PROCESSING else None


async def _started_on(pool, name, node):
    return await pool.fetchval("SELECT count(*) FROM test_observer_events WHERE name = $1 AND node = $2 "
                               "AND kind IN ('start', 'overlap')", name, node)


async def _incarnations(pool, name, n):
    rows = await pool.fetch("SELECT state FROM dl_nodes WHERE name = $1", name)
    return rows if len(rows) == n and any(r["state"] == "live" for r in rows) else None
