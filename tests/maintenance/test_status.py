"""What an operator sees: a WorkerManager on the test database runs the reaper, the elector and a
given leader-only service under its supervisor; /status lists them with their state, and the
dl_service_* and dl_leader metrics agree."""

from __future__ import annotations

import httpx
from prometheus_client import REGISTRY

from dataloader.api import create_app
from dataloader.maintenance import Scope, ServiceState
from dataloader.node import build_node
from dataloader.workers.pipelines.registry import registry
from tests.conftest import wait_until
from tests.maintenance.helpers import Crashing, Recorder, Steady
from tests.support.engine import make_settings


async def test_status_and_metrics_show_each_service(dsn, pool, db):
    settings = make_settings(dsn, leader_retry_sec=0.2, service_restart_backoff_sec=30)
    duty = Steady("leader_duty", Recorder(), scope=Scope.LEADER)
    crashing = Crashing(clock=duty.clock)
    manager = build_node(settings, dsn, pool, registry, services=[duty, crashing])
    assert manager.is_leader is False
    await manager.start()
    try:
        await wait_until(lambda: manager.is_leader and duty.running, timeout=5)
        await wait_until(lambda: crashing.runs >= 1 and crashing.last_error is not None, timeout=5)
        await wait_until(lambda: manager.reaper is not None and manager.reaper.last_tick_at is not None, timeout=5)
        app = create_app(settings, manager=manager)
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as client:
            body = (await client.get("/status")).json()
        assert body["leader"] is True
        services = {s["name"]: s for s in body["services"]}
        assert list(services) == ["leader_elector", "reaper", "leader_duty", "crashing"]
        assert services["reaper"]["scope"] == "every_node" and services["reaper"]["state"] == "running"
        assert services["reaper"]["last_tick_at"] is not None  # it ticks at start
        assert services["leader_duty"]["scope"] == "leader" and services["leader_duty"]["state"] == "running"
        assert services["crashing"]["state"] == "backoff"  # 30 s before its restart
        assert services["crashing"]["last_error"] == "ValueError: boom 1"

        def sample(name: str, **labels: str) -> float | None:
            return REGISTRY.get_sample_value(name, labels)

        assert sample("dl_service_up", service="reaper") == 1
        assert sample("dl_service_up", service="crashing") == 0
        assert sample("dl_leader", node=settings.node_name) == 1
        assert sample("dl_service_tick_seconds_count", service="reaper") >= 1
    finally:
        await manager.stop(timeout=5)
    assert {s.name: s.state for s in manager.services_status()} == {
        "leader_elector": ServiceState.STOPPED, "reaper": ServiceState.STOPPED,
        "leader_duty": ServiceState.STANDBY, "crashing": ServiceState.STOPPED}
    assert REGISTRY.get_sample_value("dl_leader", {"node": settings.node_name}) == 0


async def test_without_a_leader_only_service_no_election_runs(dsn, pool, db):
    manager = build_node(make_settings(dsn), dsn, pool, registry, services=[Steady("plain", Recorder())])
    assert manager.elector is None and manager.is_leader is None
    assert [s.name for s in manager.services_status()] == ["reaper", "plain"]
    no_reaper = build_node(make_settings(dsn), dsn, pool, registry, reaper=False)
    assert no_reaper.reaper is None and no_reaper.services_status() == []
