"""Real `python -m dataloader worker` processes racing for the ticks of a 1-second schedule: two,
then three replicas, every one running the scheduler. Exactly one job per tick (the idempotency
keys and the history agree), no gap; then every replica is killed across several ticks and one is
restarted: the missed ticks follow the policy (run_once: one job covering the gap)."""

from __future__ import annotations

import asyncio
import itertools
import signal
from datetime import timedelta

from dataloader.model.schedule import ScheduleSpec
from dataloader.schedules.manager import ScheduleManager
from dataloader.storage.schedule_repository import ScheduleRepository
from tests.conftest import wait_until

NAME = "replicas.every-second"


async def runs(pool):
    return await pool.fetch(
        "SELECT r.tick_at, r.job_id, r.skipped_before, j.idempotency_key FROM dl_schedule_runs r "
        "LEFT JOIN dl_jobs j ON j.job_id = r.job_id WHERE r.schedule_name = $1 ORDER BY r.tick_at", NAME)


def fired_by(worker) -> int:
    return worker.log().count("schedule tick enqueued")


async def test_replicas_enqueue_exactly_one_job_per_tick_and_follow_run_once_after_an_outage(sdb, workers):
    service = ScheduleManager(ScheduleRepository(sdb))
    await service.create(ScheduleSpec(name=NAME, task="dl.noop", queue="sched-unserved", every_sec=1,
                                      missed="run_once", grace_sec=2))
    nodes = [workers(queues={"other": 1}), workers(queues={"other": 1})]
    await asyncio.gather(*(n.wait_ready() for n in nodes))
    await wait_until(lambda: _count_at_least(sdb, 12), timeout=30, interval=0.2, message="12 ticks with 2 replicas")
    nodes.append(workers(queues={"other": 1}))
    await nodes[-1].wait_ready()
    two_node_ticks = len(await runs(sdb))
    await wait_until(lambda: _count_at_least(sdb, two_node_ticks + 15), timeout=30, interval=0.2,
                     message="15 more ticks with 3 replicas")
    for node in nodes:
        node.signal(signal.SIGKILL)
    for node in nodes:
        await node.wait_exit()

    before = await runs(sdb)
    ticks = [r["tick_at"] for r in before]
    # one job per tick, keyed by it, and no tick missing between the first and the last
    assert len(ticks) == len(set(ticks)) >= 27
    assert all(b - a == timedelta(seconds=1) for a, b in itertools.pairwise(ticks)), ticks
    assert all(r["idempotency_key"] == f"schedule:{NAME}:{r['tick_at'].isoformat().replace('+00:00', 'Z')}"
               for r in before)
    jobs = await sdb.fetchval("SELECT count(*) FROM dl_jobs WHERE idempotency_key LIKE $1", f"schedule:{NAME}:%")
    assert jobs == len(ticks)
    # (the first run covers the ticks between the schedule's creation and the first node's start)
    assert all(r["skipped_before"] == 0 for r in before[1:])
    per_node = [fired_by(n) for n in nodes]
    # every tick fired by exactly one node (the rows above: one per tick). A node logs a tick after
    # its commit, so a SIGKILL between the two leaves that tick unlogged: at most one per node
    assert len(ticks) - len(nodes) <= sum(per_node) <= len(ticks), per_node
    print(f"\n{len(ticks)} ticks ({two_node_ticks} with 2 replicas), fired per node: {per_node}")

    # every replica down across several ticks (real time passes), then one comes back
    last = ticks[-1]
    await wait_until(lambda: _db_now_past(sdb, last + timedelta(seconds=5)), timeout=15, interval=0.2)
    revived = workers(queues={"other": 1})
    await revived.wait_ready()
    await wait_until(lambda: _count_at_least(sdb, len(ticks) + 3), timeout=20, interval=0.2)
    revived.signal(signal.SIGTERM)
    assert await revived.wait_exit() == 0
    after = [r for r in await runs(sdb) if r["tick_at"] > last]
    first = after[0]
    gap = int((first["tick_at"] - last).total_seconds())
    assert gap >= 5 and first["skipped_before"] == gap - 1  # run_once: one job for the missed ticks
    assert all(b["tick_at"] - a["tick_at"] == timedelta(seconds=1) and b["skipped_before"] == 0
               for a, b in itertools.pairwise(after))
    print(f"outage: {gap - 1} ticks missed, one job at {first['tick_at']:%H:%M:%S}")


async def _count_at_least(pool, n: int) -> bool:
    return await pool.fetchval("SELECT count(*) FROM dl_schedule_runs WHERE schedule_name = $1", NAME) >= n


async def _db_now_past(pool, when) -> bool:
    return await pool.fetchval("SELECT now() > $1::timestamptz", when)
