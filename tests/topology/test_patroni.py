"""Failover by Patroni (docs/scaling.md "Patroni"): a local etcd and two Patroni-managed PostgreSQL
servers in `synchronous_mode`; the nodes reach them through one multi-host DSN with
`target_session_attrs=read-write`. The chaos harness (tests/chaos: nodes, HTTP enqueues, process
calls, observers, schedules, kill -9s of nodes, the lock_key probe) runs a drain, and at its
"restart" point the primary's host dies: its Patroni and every process of its PostgreSQL killed -9
at once. Nobody promotes by hand: the replica's Patroni sees the leader key expire in etcd, takes it
and promotes its server. The same checks as the `pg_ctl promote` test (tests/support/failover.py):
every acknowledged enqueue exists and succeeded, no lock_key ran twice at once across the switch,
nodes started before it finish jobs after it without a restart. Reported: the time from the
primary's death to the first job finished on the new primary."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from dataloader.storage import migrate
from tests.chaos.harness import ChaosConfig
from tests.support.failover import Failover, chaos_across_failover, create_database
from tests.support.patroni import PatroniCluster

pytestmark = [pytest.mark.process, pytest.mark.timeout(300)]

DATABASE = "dl_patroni"


async def test_patroni_promotes_the_synchronous_replica_mid_drain_and_nothing_acknowledged_is_lost(
        subprocess_env: dict[str, str], tmp_path: Path, record_property) -> None:
    cluster = PatroniCluster()
    with cluster:
        first = cluster.leader()
        assert first is not None
        await create_database(cluster.dsn(port=first.pg_port), DATABASE)
        dsn = cluster.multi_host_dsn(DATABASE)
        await migrate.upgrade(dsn)
        failover = Failover()

        async def host_dies() -> None:
            failover.killed_at, survivor = await asyncio.to_thread(cluster.kill_primary)
            failover.new_primary_port = survivor.pg_port
            failover.took_over_at = await asyncio.to_thread(cluster.wait_promoted, survivor)

        # one node kill before the failover and one after it; the switch itself takes ~ttl
        cfg = ChaosConfig(nodes=2, concurrency=4, jobs=120, kills=2, kill_interval=(1.5, 2.5), hot_keys=8,
                          hot_share=0.5, burst=(10, 30), drain_timeout_sec=90, restart=True, sigterm=False,
                          processes=2, observers=2, operation_jobs=100, settle_timeout_sec=90)
        result = await chaos_across_failover(cfg, dsn, host_dies, failover, subprocess_env,
                                             tmp_path / "nodes", cluster.logs)
        record_property("patroni_failover_to_first_job_sec", round(result.to_first_job_sec, 2))
        record_property("patroni_promote_sec", round(result.took_over_sec, 2))
        print(f"Patroni (ttl {cluster.ttl} s, loop_wait {cluster.loop_wait} s): primary host killed -> "
              f"replica promoted and writable: {result.took_over_sec:.2f} s; -> first job finished on the "
              f"new primary: {result.to_first_job_sec:.2f} s; nodes that went on without a restart: "
              f"{result.survivors}")
