"""A node restarted after kill -9 takes its dead predecessor's jobs back at once, not after their
leases: on the same machine a pid that no longer runs is certain death (jobs/reaper.py). Anything
less certain (a name used elsewhere, a pid that runs, a session still on the server) waits for the
lease, as before."""

from __future__ import annotations

import asyncio
import os
import signal
import uuid

import asyncpg
import pytest

from dataloader.jobs.reaper import Reaper
from dataloader.machine import pid_running, process_namespace
from dataloader.storage.observer_repository import NodeRepository
from dataloader.storage.repositories import JobRepository
from tests.conftest import wait_until
from tests.support.engine import enqueue

pytestmark = [pytest.mark.skipif(process_namespace() is None, reason="needs /proc (Linux)"), pytest.mark.process]


async def _dead_pid() -> int:
    child = await asyncio.create_subprocess_exec("true")
    await child.wait()
    assert not pid_running(child.pid)
    return child.pid


async def _node(db: asyncpg.Pool, name: str, pid: int, machine: str | None) -> uuid.UUID:
    node_id = uuid.uuid4()
    await db.execute("INSERT INTO dl_nodes (node_id, name, host, pid, version, machine) "
                     "VALUES ($1, $2, 'h', $3, 'v', $4)", node_id, name, pid, machine)
    return node_id


async def _running_job(db: asyncpg.Pool, worker: str, session: int) -> uuid.UUID:
    """A job running attempt 1, claimed by `worker` in backend `session` (as claim_take.sql journals)."""
    job_id = await enqueue(db, "dl.noop", queue="takeover", lease_ttl_sec=3600)
    await db.execute("UPDATE dl_jobs SET status = 'running', attempt = 1, started_at = now(), "
                     "lease_expires_at = now() + interval '1 hour' WHERE job_id = $1", job_id)
    await db.execute("INSERT INTO dl_job_events (job_id, queue, kind, payload) VALUES ($1, 'takeover', 'picked', $2)",
                     job_id, {"attempt": 1, "worker": worker, "session": session})
    return job_id


def _reaper(db: asyncpg.Pool) -> Reaper:
    return Reaper(JobRepository(db), period=1, nodes=NodeRepository(db))


async def test_the_jobs_of_a_dead_pid_on_this_machine_are_taken_back_and_the_node_declared_dead(db: asyncpg.Pool):
    here = process_namespace()
    ghost = await _node(db, "ghost", await _dead_pid(), here)
    gone_session = await db.fetchval("SELECT max(pid) + 100000 FROM pg_stat_activity")
    job = await _running_job(db, "ghost", gone_session)

    assert await _reaper(db).tick() == 1

    row = await db.fetchrow("SELECT status, attempt, error FROM dl_jobs WHERE job_id = $1", job)
    assert row["status"] == "queued" and row["error"].startswith("its worker died")
    reason = await db.fetchval("SELECT payload->>'reason' FROM dl_job_events WHERE job_id = $1 AND kind = 'requeue'",
                               job)
    assert reason == "worker_died"
    assert await db.fetchval("SELECT state FROM dl_nodes WHERE node_id = $1", ghost) == "dead"


@pytest.mark.parametrize("doubt", ["pid_runs", "name_elsewhere", "session_alive", "unknown_machine"])
async def test_anything_less_than_certain_death_leaves_the_job_to_its_lease(db: asyncpg.Pool, doubt: str):
    here = process_namespace()
    sleeper = await asyncio.create_subprocess_exec("sleep", "30") if doubt == "pid_runs" else None
    pid = sleeper.pid if sleeper is not None else await _dead_pid()
    await _node(db, "maybe", pid, None if doubt == "unknown_machine" else here)
    if doubt == "name_elsewhere":
        await _node(db, "maybe", await _dead_pid(), "another-boot/pid:[1]")
    async with db.acquire() as holder:
        session = (await holder.fetchval("SELECT pg_backend_pid()") if doubt == "session_alive"
                   else await db.fetchval("SELECT max(pid) + 100000 FROM pg_stat_activity"))
        job = await _running_job(db, "maybe", session)
        try:
            assert await _reaper(db).tick() == 0
        finally:
            if sleeper is not None:
                sleeper.kill()
                await sleeper.wait()
    assert await db.fetchval("SELECT status::text FROM dl_jobs WHERE job_id = $1", job) == "running"


async def test_a_restarted_node_with_a_fixed_name_takes_back_only_what_its_predecessor_claimed(db: asyncpg.Pool):
    """The same name, two incarnations: the dead one's job (its session gone) comes back; a job this
    process claimed under the name (its session alive) stays, and so does one whose session is gone
    but which was claimed since this process's incarnation started (its own control connection
    dropped: its worker stops that attempt itself, and the lease decides)."""
    here = process_namespace()
    await _node(db, "fixed", await _dead_pid(), here)
    dead_job = await _running_job(db, "fixed", await db.fetchval("SELECT max(pid) + 100000 FROM pg_stat_activity"))
    await _node(db, "fixed", os.getpid(), here)  # this process's incarnation starts after that claim
    async with db.acquire() as holder:
        live_job = await _running_job(db, "fixed", await holder.fetchval("SELECT pg_backend_pid()"))
        mine_dropped = await _running_job(db, "fixed",
                                          await db.fetchval("SELECT max(pid) + 100000 FROM pg_stat_activity"))
        assert await _reaper(db).tick() == 1
    statuses = dict(await db.fetch("SELECT job_id, status::text FROM dl_jobs WHERE job_id = ANY($1)",
                                   [dead_job, live_job, mine_dropped]))
    assert statuses == {dead_job: "queued", live_job: "running", mine_dropped: "running"}


@pytest.mark.timeout(90)
async def test_kill_9_then_a_restart_runs_the_jobs_again_long_before_their_leases(db: asyncpg.Pool, workers):
    """Real processes: four jobs with a 120 s lease run on a worker killed with SIGKILL; a worker
    started after it finishes them in seconds, and a worker that stayed up keeps its own job."""
    steady = workers(queues={"steady": 1})
    await steady.wait_ready()
    kept = await enqueue(db, "test.async_sleep", queue="steady", lease_ttl_sec=120, args={"seconds": 8})
    jobs = [await enqueue(db, "test.async_sleep", queue="q", lease_ttl_sec=120, args={"seconds": 2})
            for _ in range(4)]
    victim = workers(queues={"q": 4})
    await victim.wait_ready()

    async def running(ids: list[uuid.UUID]) -> bool:
        return await db.fetchval("SELECT count(*) FROM dl_jobs WHERE job_id = ANY($1) AND status = 'running'",
                                 ids) == len(ids)

    await wait_until(lambda: running([*jobs, kept]), timeout=20, message="the jobs to run")
    # its node row names its pid: a node killed before it registered leaves its jobs to their leases
    await wait_until(lambda: db.fetchval("SELECT count(*) FROM dl_nodes WHERE pid = $1 AND state = 'live'",
                                         victim.pid), timeout=20, message="the victim's node to register")
    victim.signal(signal.SIGKILL)
    assert await victim.wait_exit() == -signal.SIGKILL
    successor = workers(queues={"q": 4})
    await successor.wait_ready()

    async def done() -> bool:
        return await db.fetchval("SELECT count(*) FROM dl_jobs WHERE job_id = ANY($1) AND status = 'succeeded'",
                                 jobs) == len(jobs)

    await wait_until(done, timeout=30, message="the killed worker's jobs to run again before their 120 s leases")
    reasons = await db.fetch("SELECT payload->>'reason' AS reason FROM dl_job_events WHERE job_id = ANY($1) "
                             "AND kind = 'requeue'", jobs)
    assert [r["reason"] for r in reasons] == ["worker_died"] * 4
    assert await db.fetchval("SELECT attempt FROM dl_jobs WHERE job_id = $1", kept) == 1
    assert await db.fetchval("SELECT status::text FROM dl_jobs WHERE job_id = $1", kept) in ("running", "succeeded")
    assert await db.fetchval("SELECT state FROM dl_nodes WHERE pid = $1", victim.pid) == "dead"


async def test_a_job_whose_session_outlived_the_first_look_is_taken_on_a_later_one(db: asyncpg.Pool, dsn: str):
    here = process_namespace()
    ghost = await _node(db, "slow-exit", await _dead_pid(), here)
    lingering = await asyncpg.connect(dsn)  # its backend still on the server at the first look
    try:
        job = await _running_job(db, "slow-exit", await lingering.fetchval("SELECT pg_backend_pid()"))
        assert await _reaper(db).tick() == 0
        assert await db.fetchval("SELECT state FROM dl_nodes WHERE node_id = $1", ghost) == "dead"
    finally:
        await lingering.close()
    await wait_until(lambda: _session_gone(db, job), timeout=10, message="the backend to leave")
    assert await _reaper(db).tick() == 1


async def _session_gone(db: asyncpg.Pool, job: uuid.UUID) -> bool:
    return await db.fetchval("SELECT NOT EXISTS (SELECT 1 FROM pg_stat_activity a JOIN dl_job_events e "
                             "ON a.pid = (e.payload->>'session')::int WHERE e.job_id = $1 AND e.kind = 'picked')", job)
