"""Kill -9 the leader of real `dataloader worker` processes and time the takeover; shared by the
test (tests/maintenance/test_failover.py) and the measuring command (measure_failover.py)."""

from __future__ import annotations

import asyncio
import signal

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


async def kill_leader_and_time_takeover(db: asyncpg.Pool, workers: dict[int, WorkerProcess],
                                        bound_sec: float) -> tuple[int, int, float]:
    """SIGKILL the current leader; wait (polling every 10 ms, at most `bound_sec`) until a live
    process holds the lock. Returns (old pid, new pid, seconds from the kill to the new holder)."""
    loop = asyncio.get_running_loop()
    old = await leader_pid(db)
    assert old in workers, f"leader {old} is none of {sorted(workers)}"
    victim = workers.pop(old)
    victim.signal(signal.SIGKILL)
    killed_at = loop.time()
    while True:
        now = await leader_pid(db)
        if now is not None and now != old:
            took = loop.time() - killed_at
            assert now in workers, f"new leader {now} is not a live worker"
            await victim.wait_exit()
            return old, now, took
        if loop.time() - killed_at > bound_sec:
            raise AssertionError(f"no new leader {bound_sec:.2f}s after kill -9 of {old} (holder: {now})")
        await asyncio.sleep(0.01)
