"""Through a REAL PgBouncer (docs/scaling.md "PgBouncer"): with DL_DB_DSN on a transaction-pooling
PgBouncer and DL_DB_DIRECT_DSN on the server, producers and the API go through the pooler while every
session (control connections with their lock_keys' advisory locks, LISTEN, the leader, migrations)
goes direct, and the engine's promises hold: one holder per lock_key, fencing, no job lost with real
worker processes and one of them killed -9. With only a transaction-pooled DSN, start-up refuses
with one line (a ConfigError in Python, exit 2 from the CLI). Each test starts its own pgbouncer."""

from __future__ import annotations

import asyncio
import itertools
import json
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import asyncpg
import pytest

from dataloader import App, ConfigError, Settings
from dataloader.jobs.reaper import Reaper
from dataloader.storage.repositories import JobRepository
from dataloader.storage.session_probe import Pooling, probe
from tests.chaos.harness import ChaosConfig, ChaosRun, format_table
from tests.conftest import wait_until
from tests.support.cli import run as run_cli
from tests.support.pgbouncer import PgBouncer

pytestmark = [pytest.mark.process, pytest.mark.timeout(300)]


@pytest.fixture
def bouncer(dsn: str) -> Iterator[PgBouncer]:
    with PgBouncer(dsn, pool_mode="transaction", pool_size=20) as running:
        yield running


async def test_the_probe_tells_direct_session_and_transaction_pooling_apart(dsn: str, bouncer: PgBouncer) -> None:
    assert await probe(dsn) is Pooling.DIRECT
    assert await probe(bouncer.dsn) is Pooling.TRANSACTION
    with PgBouncer(dsn, pool_mode="session") as session_pooler:
        assert await probe(session_pooler.dsn) is Pooling.SESSION


def _start_worker(env: dict[str, str], db_dsn: str) -> tuple[int, str]:
    """`dataloader worker` as a real process (it installs signal handlers): its exit code and the
    messages of its error lines."""
    env = {**env, "DL_DB_DSN": db_dsn, "WORKERS_JSON": '[{"queue":"q","concurrency":1}]'}
    done = subprocess.run([sys.executable, "-m", "dataloader", "worker"], env=env, capture_output=True, text=True,
                          timeout=60)
    messages = []
    for line in (done.stdout + done.stderr).splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            messages.append(line)
            continue
        if record.get("level") in ("error", "ERROR", "critical"):
            messages.append(str(record.get("message", record.get("event", ""))))
    assert "Traceback" not in done.stderr, done.stderr
    return done.returncode, "\n".join(messages)


async def test_only_a_transaction_pooled_dsn_is_refused_with_one_line(dsn: str, bouncer: PgBouncer,
                                                                      subprocess_env: dict[str, str]) -> None:
    # PgBouncer as it is installed refuses our connections' session settings: one clear line at open
    with pytest.raises(ConfigError) as refused:
        await App(Settings(db_dsn=bouncer.dsn)).open()
    assert refused.value.variable == "DL_DB_DSN" and "DL_DB_DIRECT_DSN" in refused.value.problem

    # configured to let them pass (ignore_startup_parameters), the connection opens; a producer needs
    # no session, so enqueue works, but running workers (or migrating) is refused by the probe
    with PgBouncer(dsn, pool_mode="transaction", ignore_startup_parameters="enable_seqscan, jit") as lenient:
        app = App(Settings(db_dsn=lenient.dsn, workers_json='[{"queue":"q","concurrency":1}]'))
        await app.open()
        try:
            job = await app.enqueue("dl.noop", queue="q")
            assert (await app.get(job.id)).status.value == "queued"
            with pytest.raises(ConfigError) as refused:
                async with app.running():
                    pass
            assert refused.value.variable == "DL_DB_DSN" and "DL_DB_DIRECT_DSN" in refused.value.problem
            assert "transaction-pooling" in refused.value.problem
            assert app.served_queues() == frozenset()  # nothing started
            with pytest.raises(ConfigError):
                await app.migrate()
        finally:
            await app.close()
        code, said = _start_worker(subprocess_env, lenient.dsn)
        assert code == 2 and "config_error" in said and "DL_DB_DSN: leads through a transaction-pooling" in said, said

    # a "direct" DSN that is pooled too is refused, naming that variable
    app = App(Settings(db_dsn=bouncer.dsn, db_direct_dsn=f"{bouncer.dsn}?application_name=x"))
    await app.open()
    try:
        with pytest.raises(ConfigError) as refused:
            async with app.running(queues=["q"]):
                pass
        assert refused.value.variable == "DL_DB_DIRECT_DSN"
    finally:
        await app.close()

    result = run_cli(["db", "upgrade"], {"DL_DB_DSN": bouncer.dsn})
    lines = [line for line in result.stderr.splitlines() if line.startswith("dataloader:")]
    assert result.returncode == 2 and len(lines) == 1, result.stderr
    # migrating probes before it opens a pool: the probe's line
    assert lines[0].startswith("dataloader: configuration error: DL_DB_DSN: leads through a transaction-pooling")
    assert "DL_DB_DIRECT_DSN" in lines[0] and "Traceback" not in result.stderr
    code, said = _start_worker(subprocess_env, bouncer.dsn)
    assert code == 2 and "DL_DB_DSN" in said and "DL_DB_DIRECT_DSN" in said, said


async def test_lock_keys_and_fencing_hold_with_producers_through_the_pooler(dsn: str, bouncer: PgBouncer,
                                                                            pool: asyncpg.Pool) -> None:
    """Jobs enqueued through PgBouncer, run by an in-process node whose sessions go direct: no two
    jobs of one lock_key overlap, and a job the reaper took back cannot be finished by its old
    attempt (its finish is refused; the job runs again and succeeds once)."""
    queue = f"pgb-{uuid.uuid4().hex[:8]}"
    settings = Settings(db_dsn=bouncer.dsn, db_direct_dsn=dsn, heartbeat_sec=0.5, reaper_period_sec=0.5,
                        workers_json=json.dumps([{"queue": queue, "concurrency": 6}]))
    app = App(settings)
    await app.open()
    try:
        keys = [f"k{i}" for i in range(3)]
        jobs = [await app.enqueue("test.recorded_sleep", {"dsn": dsn, "seconds": 0.1, "chunks": 2},
                                  queue=queue, lock_key=keys[i % 3]) for i in range(24)]
        async with app.running() as manager:
            # the control connections are direct: their sessions hold the keys' advisory locks
            assert manager.env.pool is not app.pool
            await wait_until(lambda: pool.fetchval(
                "SELECT count(*) = 24 FROM dl_jobs WHERE queue = $1 AND status = 'succeeded'", queue),
                timeout=60, message="every job through the pooler to succeed")
        runs = await pool.fetch("SELECT lock_key, started_at, ended_at FROM test_runs WHERE job_id = ANY($1)"
                                " ORDER BY lock_key, started_at", [j.id for j in jobs])
        assert len(runs) == 24 and all(r["ended_at"] is not None for r in runs)
        for before, after in itertools.pairwise(runs):
            if before["lock_key"] == after["lock_key"]:
                assert after["started_at"] >= before["ended_at"], f"two holders of {before['lock_key']}"

        # fencing: the reaper, its statement sent through PgBouncer, takes a running attempt back (its
        # lease made to look expired, as time would): the old attempt stops without finishing, and
        # the job runs again and succeeds once
        gate = await app.enqueue("test.recorded_sleep", {"dsn": dsn, "seconds": 6, "chunks": 60},
                                 queue=queue, lock_key="fence")
        reaper = Reaper(JobRepository(app.pool), period=1)

        async def reaped() -> bool:
            await pool.execute("UPDATE dl_jobs SET lease_expires_at = now() - interval '1 second' "
                               "WHERE job_id = $1 AND status = 'running' AND attempt = 1", gate.id)
            return await reaper.tick() == 1  # a heartbeat between the two renewed it: again

        # no reaper on the node: the take-back is the test's reaper's alone, through PgBouncer (a
        # node's reaper passing first, or again, would take back this attempt or the next)
        async with app.running(reaper=False):
            await wait_until(lambda: pool.fetchval("SELECT status = 'running' FROM dl_jobs WHERE job_id = $1",
                                                   gate.id), timeout=20, message="the job to start")
            await wait_until(reaped, timeout=20, interval=0.2, message="the reaper to take the job back")
            await wait_until(lambda: pool.fetchval("SELECT status = 'succeeded' FROM dl_jobs WHERE job_id = $1",
                                                   gate.id), timeout=60, message="the job's second attempt")
        attempts = await pool.fetch("SELECT attempt, ended_at FROM test_runs WHERE job_id = $1 ORDER BY attempt",
                                    gate.id)
        kinds = await pool.fetch("SELECT kind FROM dl_job_events WHERE job_id = $1 ORDER BY event_id", gate.id)
        assert [k["kind"] for k in kinds].count("done") == 1
        assert [a["attempt"] for a in attempts] == [1, 2]
        assert attempts[0]["ended_at"] is None and attempts[1]["ended_at"] is not None  # fenced off, stopped
    finally:
        await app.close()


@pytest.mark.exclusive(when="shared_server")
async def test_no_job_is_lost_with_nodes_behind_pgbouncer_and_kills(dsn: str, pg_server, subprocess_env,
                                                                    bouncer: PgBouncer, tmp_path: Path) -> None:
    """The chaos harness with every node's DL_DB_DSN on PgBouncer (HTTP enqueues, the API and the
    producers' statements go through it) and DL_DB_DIRECT_DSN on the server: kill -9s of nodes, no
    job lost, doubled or stuck, no lock_key overlap, every journal agrees."""
    cfg = ChaosConfig(nodes=2, concurrency=4, jobs=150, kills=4, kill_interval=(2.0, 3.0), hot_keys=8,
                      hot_share=0.5, burst=(10, 30), drain_timeout_sec=90, restart=False, sigterm=True,
                      processes=2, observers=2, operation_jobs=200)

    async def no_restart() -> str:
        raise AssertionError("this run restarts nothing")

    run = ChaosRun(cfg, dsn, no_restart, subprocess_env, tmp_path / "nodes")
    for slot in run.slots:
        # the chaos probe (CHAOS_DSN) holds session locks of its own: direct, like the engine's
        slot.env = {**slot.env, "DL_DB_DSN": bouncer.dsn, "DL_DB_DIRECT_DSN": dsn, "CHAOS_DSN": dsn}
    report = await run.execute()
    table = format_table(report)
    print(table)
    detail = f"{table}\nexamples: {json.dumps(report['examples'], default=str)}\n{bouncer.log()[-3000:]}"
    assert report["drained"], detail
    assert report["failures"] == {}, detail
    assert report["counts"]["jobs_acked"] == cfg.jobs, detail
    by_reason = report["counts"]["requeues_by_reason"]
    assert by_reason.get("lease_expired", 0) + by_reason.get("worker_died", 0) > 0, detail
    # the producers' statements really went through the pooler (pgbouncer counted its clients' queries)
    stats = await _pgbouncer_stats(bouncer)
    assert stats["total_query_count"] > cfg.jobs, stats


async def _pgbouncer_stats(bouncer: PgBouncer) -> dict[str, int]:
    """SHOW STATS of the bouncer's admin console, summed over its databases. The console speaks the
    simple query protocol only: psycopg's ClientCursor does, asyncpg has no public way to."""
    import psycopg

    def read() -> dict[str, int]:
        with psycopg.connect(host="127.0.0.1", port=bouncer.port, user=bouncer.user, dbname="pgbouncer",
                             autocommit=True, cursor_factory=psycopg.ClientCursor) as conn:
            cursor = conn.execute("SHOW STATS")
            names = [c.name for c in cursor.description or []]
            totals: dict[str, int] = {}
            for row in cursor.fetchall():
                for name, value in zip(names, row, strict=True):
                    if name != "database" and value is not None:  # counters (bigint or numeric)
                        totals[name] = totals.get(name, 0) + int(value)
            return totals

    return await asyncio.to_thread(read)
