"""Kill -9 the leader of real `dataloader worker` processes and time the takeover; shared by the
test (tests/maintenance/test_failover.py) and the measuring command (measure_failover.py)."""

from __future__ import annotations

import asyncio
import json
import signal
import time
from datetime import datetime

import asyncpg

from dataloader.maintenance import LEADER_LOCK_CLASS, LEADER_LOCK_ID
from dataloader.maintenance.leader import APPLICATION_NAME_PREFIX
from tests.support.engine import WorkerProcess

# The table the leader_probe service (loaded only into worker processes) writes to.
TICKS_DDL = """
CREATE TABLE IF NOT EXISTS test_leader_ticks (
    id bigserial PRIMARY KEY,
    pid int NOT NULL,
    at timestamptz NOT NULL DEFAULT clock_timestamp()
)
"""

# Who holds the leader lock in this database: the elector session's application_name carries the
# node name, which ends in the process id (DL_NODE_NAME defaults to host:pid).
LEADER_QUERY = """
SELECT a.application_name
FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 2
  AND l.classid = ($1::int4)::oid AND l.objid = ($2::int4)::oid
  AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
"""


async def leader_pid(db: asyncpg.Pool) -> int | None:
    names = [r["application_name"] for r in await db.fetch(LEADER_QUERY, LEADER_LOCK_CLASS, LEADER_LOCK_ID)]
    assert len(names) <= 1, f"two sessions hold the leader lock: {names}"
    if not names or not names[0].startswith(APPLICATION_NAME_PREFIX):
        return None
    return int(names[0].rsplit(":", 1)[1])


def worker_env(subprocess_env: dict[str, str]) -> dict[str, str]:
    env = dict(subprocess_env)
    env["DL_PIPELINE_MODULES"] = env.get("DL_PIPELINE_MODULES", "") + ",tests.maintenance.leader_probe"
    return env


def start_worker(env: dict[str, str], retry_sec: float) -> WorkerProcess:
    return WorkerProcess(env, leader_retry_sec=retry_sec, leader_probe_timeout_sec=2).start()


def became_leader_at(worker: WorkerProcess) -> float | None:
    """When (epoch seconds, the worker's own clock stamp) the worker last logged that it became the
    maintenance leader; None if it never did."""
    stamps = []
    for line in worker.log().splitlines():
        if line.startswith("{") and "now the maintenance leader" in line:
            stamps.append(datetime.fromisoformat(json.loads(line)["ts"]).timestamp())
    return stamps[-1] if stamps else None


async def kill_leader_and_time_takeover(db: asyncpg.Pool, workers: dict[int, WorkerProcess],
                                        bound_sec: float) -> tuple[int, int, float]:
    """SIGKILL the current leader; wait until a live process holds the lock. Returns (old pid, new
    pid, seconds from the kill to the new leader's own log line saying it leads).

    The time is measured from the events, not from this side's polling: the kill's moment (taken
    right before the signal) and the `ts` of the new leader's "now the maintenance leader" line (same
    machine, same clock). A loaded machine that delays this process's polling of pg_locks does not
    stretch it; the wait for the holder is only bounded generously (bound + 30 s) to end a stuck run.
    Raises AssertionError when the takeover took longer than `bound_sec`."""
    loop = asyncio.get_running_loop()
    old = await leader_pid(db)
    assert old in workers, f"leader {old} is none of {sorted(workers)}"
    victim = workers.pop(old)
    killed_wall = time.time()
    victim.signal(signal.SIGKILL)
    give_up = loop.time() + bound_sec + 30
    while True:
        now = await leader_pid(db)
        if now is not None and now != old:
            assert now in workers, f"new leader {now} is not a live worker"
            break
        if loop.time() > give_up:
            raise AssertionError(f"no new leader {bound_sec + 30:.2f}s after kill -9 of {old} (holder: {now})")
        await asyncio.sleep(0.01)
    await victim.wait_exit()
    while (led := became_leader_at(workers[now])) is None or led < killed_wall:
        if loop.time() > give_up:
            raise AssertionError(f"new leader {now} never logged that it leads:\n{workers[now].log()}")
        await asyncio.sleep(0.01)
    took = led - killed_wall
    if took > bound_sec:
        raise AssertionError(f"new leader {now} {took:.3f}s after kill -9 of {old} (bound {bound_sec:.2f}s)")
    return old, now, took
