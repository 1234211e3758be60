"""Primary failover with a real streaming standby (docs/scaling.md "A standby that takes over").

A primary and a `pg_basebackup` standby with synchronous replication; the nodes reach them through
one multi-host DSN with `target_session_attrs=read-write`. The chaos harness (tests/chaos) runs its
nodes, HTTP enqueues, process calls, observers, schedules and kill -9s, and at its "restart" the
primary is killed -9 (every process of its server) and the standby promoted with `pg_ctl promote`.
It fails on any job the API acknowledged that is not there afterwards, any overlap of one lock_key
(its probe lock lives on the server: the old primary's die with it and are retaken on the new one),
any stuck job; and a node started before the failover must finish jobs after it without a restart.
The mid-drain switch is held longer than a lease, so every attempt running at the kill is taken
back by the new primary's reaper while its first holder has no database to learn it from.
Reported: the time from the primary's death to the first job finished on the new primary."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from pathlib import Path

import asyncpg
import pytest

from dataloader import App, Settings
from dataloader.storage import migrate
from tests.chaos.harness import ChaosConfig
from tests.support.failover import Failover, chaos_across_failover, create_database
from tests.support.replication import ReplicatedCluster

pytestmark = [pytest.mark.process, pytest.mark.timeout(420)]

DATABASE = "dl_failover"


async def test_the_standby_takes_over_mid_drain_and_nothing_acknowledged_is_lost(
        subprocess_env: dict[str, str], tmp_path: Path, record_property) -> None:
    with ReplicatedCluster(synchronous=True) as cluster:
        cluster.wait_streaming()
        await create_database(cluster.dsn(), DATABASE)
        dsn = cluster.multi_host_dsn(DATABASE)
        await migrate.upgrade(dsn)
        failover = Failover(new_primary_port=cluster.standby_port)
        cfg = ChaosConfig(nodes=2, concurrency=4, jobs=150, kills=4, kill_interval=(2.0, 3.0), hot_keys=8,
                          hot_share=0.5, burst=(10, 30), drain_timeout_sec=120, restart=True, sigterm=False,
                          processes=2, observers=2, operation_jobs=200, settle_timeout_sec=120)

        async def fail_over() -> None:
            failover.killed_at = cluster.kill_primary()
            # The switch outlasts every lease, as a slow promotion does (a CI run once took 5.2 s
            # against 5 s leases): the new primary's reaper takes back attempts whose first holders
            # still run, and only their own clocks stop them in time (workers/lease_guard.py).
            await asyncio.sleep(cfg.lease_ttl_sec + 1)
            failover.took_over_at = await asyncio.to_thread(cluster.promote)
        result = await chaos_across_failover(
            cfg, dsn, fail_over, failover, subprocess_env, tmp_path / "nodes",
            lambda: f"primary log: {cluster.log('primary')[-1500:]}\nstandby log: {cluster.log('standby')[-1500:]}")
        record_property("failover_to_first_job_sec", round(result.to_first_job_sec, 2))
        record_property("failover_promote_sec", round(result.took_over_sec, 2))
        print(f"primary killed -> standby promoted: {result.took_over_sec:.2f} s; "
              f"-> first job finished on the new primary: {result.to_first_job_sec:.2f} s; "
              f"nodes that went on without a restart: {result.survivors}")


@pytest.mark.parametrize("synchronous", [False, True], ids=["asynchronous", "synchronous"])
async def test_what_a_promoted_standby_has_of_the_enqueues_the_primary_acknowledged(synchronous: bool) -> None:
    """docs/scaling.md "Synchronous or asynchronous": the standby falls behind (the primary's WAL
    sender stopped, as a slow link or a busy standby would hold it back), the primary dies, the
    standby is promoted.
    Asynchronous: enqueues the primary acknowledged in that window are gone. Synchronous: no enqueue
    is acknowledged in that window (it waits for the standby), so none acknowledged is gone."""
    with ReplicatedCluster(synchronous=synchronous) as cluster:
        cluster.wait_streaming()
        await create_database(cluster.dsn(), DATABASE)
        dsn = cluster.multi_host_dsn(DATABASE)
        await migrate.upgrade(dsn)
        standby = cluster.dsn(DATABASE, port=cluster.standby_port)
        app = App(Settings(db_dsn=dsn))
        await app.open()
        acknowledged: list[str] = []
        try:
            for i in range(5):
                acknowledged.append(str((await app.enqueue("dl.noop", queue="q", idempotency_key=f"before-{i}")).id))
            await _wait_replayed(standby, 5)
            # the sender, not the receiver: WAL already in the standby's socket buffer would still arrive
            sender = await _wal_sender_pid(cluster.dsn())
            os.kill(sender, signal.SIGSTOP)
            try:
                for i in range(3 if synchronous else 20):  # synchronous: each one waits its 2 s
                    try:
                        job = await asyncio.wait_for(app.enqueue("dl.noop", queue="q",
                                                                 idempotency_key=f"behind-{i}"), timeout=2)
                    except TimeoutError:
                        continue  # not acknowledged: the commit waits for the standby
                    acknowledged.append(str(job.id))
            finally:
                cluster.kill_primary()  # SIGKILL ends the stopped sender too
            await asyncio.to_thread(cluster.promote)
        finally:
            await app.close()
        conn = await asyncpg.connect(dsn)
        try:
            present = {str(r["job_id"]) for r in await conn.fetch("SELECT job_id FROM dl_jobs")}
        finally:
            await conn.close()
        lost = [job_id for job_id in acknowledged if job_id not in present]
        print(f"{'synchronous' if synchronous else 'asynchronous'}: acknowledged {len(acknowledged)}, "
              f"after the failover {len(present)}, acknowledged but lost {len(lost)}")
        if synchronous:
            assert len(acknowledged) == 5 and not lost  # nothing acknowledged while the standby lagged
        else:
            assert len(acknowledged) == 25 and len(lost) == 20  # every enqueue of the lag window is gone


async def _wait_replayed(standby_dsn: str, jobs: int, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while True:
        conn = await asyncpg.connect(standby_dsn)
        try:
            if await conn.fetchval("SELECT count(*) FROM dl_jobs") >= jobs:
                return
        except asyncpg.exceptions.UndefinedTableError:
            pass  # asynchronous: the standby has not replayed the migration yet
        finally:
            await conn.close()
        if time.monotonic() > deadline:
            raise AssertionError("the standby did not replay the first jobs")
        await asyncio.sleep(0.1)


async def _wal_sender_pid(primary_dsn: str) -> int:
    conn = await asyncpg.connect(primary_dsn)
    try:
        pid = await conn.fetchval("SELECT pid FROM pg_stat_replication WHERE application_name = 'standby1'")
    finally:
        await conn.close()
    assert pid, "the primary has no WAL sender"
    return int(pid)
