"""The chaos suite in the test run: a short run (~60 s: 2 nodes, a few hundred jobs, ~9 kill -9s,
one PostgreSQL restart, one SIGTERM) that fails on any lost, doubled, stuck or failed job, any
overlap of one lock_key, or any journal that disagrees with its row; plus the self-tests that
show the probe and the checks can fail (a check that cannot fail proves nothing).

The restart is real (`pg_ctl restart`) on the embedded server, and on an external one when
DL_TEST_RESTART_CMD says how to restart it. On an external server without it, the harness can only
terminate every session of the test database: the run then says so (a warning, the report's
"NOT REAL" row, restart.how = "terminated"), and DL_TEST_REQUIRE_RESTART=1 makes that a failure."""

from __future__ import annotations

import json
import os
import uuid
import warnings
from datetime import UTC, datetime, timedelta
from pathlib import Path

import asyncpg
import pytest

from tests.chaos import pipelines
from tests.chaos.harness import ChaosConfig, ChaosRun, _restart_label, check_journal, format_table, overlapping_runs
from tests.conftest import wait_until
from tests.support.database import restart_server
from tests.support.engine import enqueue, running_engine


async def _run_one_chaos_job(dsn: str, pool: asyncpg.Pool, lock_key: str) -> asyncpg.Record:
    queue = f"probe-{uuid.uuid4().hex[:8]}"
    job_id = await enqueue(pool, pipelines.TASK, queue=queue, lock_key=lock_key,
                           args={"chunks": 2, "chunk_ms": 30, "dsn": dsn})
    async with running_engine(dsn, pool, queues={queue: 1}):
        await wait_until(lambda: pool.fetchval("SELECT status = 'succeeded' FROM dl_jobs WHERE job_id = $1",
                                               job_id), timeout=20, message="the chaos job to succeed")
    run = await pool.fetchrow("SELECT * FROM chaos_runs WHERE job_id = $1", job_id)
    assert run is not None and run["outcome"] == "completed"
    return run


async def test_probe_records_a_violation_when_its_key_is_held_elsewhere(dsn, pool):
    await pool.execute(pipelines.RUNS_DDL)
    key = f"probe-self-test-{uuid.uuid4().hex[:8]}"
    holder = await asyncpg.connect(dsn)
    try:
        assert await holder.fetchval(pipelines.LOCK_SQL, pipelines.PROBE_CLASS_ID, key) is True
        # the job still runs (the engine's one-bigint lock space is separate), but its probe fails
        held = await _run_one_chaos_job(dsn, pool, key)
        assert held["probe_ok"] is False, "the probe must notice a second holder of its key"
    finally:
        await holder.close()
    # control: with the key free, the same job's probe succeeds
    free = await _run_one_chaos_job(dsn, pool, key)
    assert free["probe_ok"] is True


def test_checks_fail_on_overlap_and_on_a_journal_that_disagrees() -> None:
    t = datetime(2030, 1, 1, tzinfo=UTC)
    s = timedelta(seconds=1)
    runs = [{"lock_key": "k", "job_id": "a", "started_at": t, "ended_at": t + 2 * s},
            {"lock_key": "k", "job_id": "b", "started_at": t + s, "ended_at": t + 3 * s},
            {"lock_key": "k", "job_id": "c", "started_at": t + 3 * s, "ended_at": t + 4 * s},
            {"lock_key": "k", "job_id": "killed", "started_at": t, "ended_at": None}]
    assert overlapping_runs(runs) == [("k", "a", "b")]

    def ev(i: int, kind: str, **payload: object) -> dict[str, object]:
        return {"event_id": i, "kind": kind, "payload": payload, "ts": float(i)}

    good = [ev(1, "queued"), ev(2, "picked", attempt=1, worker="n1.1"),
            ev(3, "requeue", attempt=1, reason="lease_expired"), ev(4, "picked", attempt=2, worker="n2.1"),
            ev(5, "requeue", attempt=2, reason="shutdown"), ev(6, "picked", attempt=2, worker="n2.2"),
            ev(7, "done", attempt=2)]
    job = {"job_id": "j", "status": "succeeded", "attempt": 2}
    attempts: list[dict[str, object]] = []
    assert check_journal(job, good, attempts) is None
    assert [a["end"] for a in attempts] == ["requeue:lease_expired", "requeue:shutdown", "done"]
    assert attempts[0]["next_picked_ts"] == 4.0
    assert check_journal({**job, "attempt": 3}, good, []) is not None  # attempt disagrees
    assert check_journal(job, good[:-1], []) is not None  # no 'done' for a succeeded row
    assert check_journal(job, [good[0], good[1], good[3], good[6]], []) is not None  # picked twice


def test_a_restart_that_only_terminated_sessions_is_reported_as_not_real() -> None:
    assert _restart_label({"how": "restarted", "t_sec": 5.0}) == "PostgreSQL restart"
    assert "NOT REAL" in _restart_label({"how": "terminated", "t_sec": 5.0})


@pytest.mark.timeout(300)
@pytest.mark.exclusive(when="shared_server")  # restarts PostgreSQL: alone when the workers share one
async def test_chaos_short(dsn, pg_server, subprocess_env, tmp_path: Path) -> None:
    cfg = ChaosConfig(nodes=2, concurrency=6, jobs=300, kills=9, kill_interval=(2.5, 3.5), hot_keys=12,
                      hot_share=0.5, burst=(10, 40), drain_timeout_sec=90)
    restarts: list[str] = []

    async def restart() -> str:
        how = await restart_server(pg_server, dsn)
        restarts.append(how)
        return how

    run = ChaosRun(cfg, dsn, restart, subprocess_env, tmp_path / "nodes")
    report = await run.execute()
    (tmp_path / "report.json").write_text(json.dumps(report, indent=2, default=str))
    table = format_table(report)
    print(table)
    detail = f"PostgreSQL was {restarts}\n{table}\nexamples: {json.dumps(report['examples'], default=str)}"
    assert report["drained"], detail
    assert report["failures"] == {}, detail
    assert restarts and report["counts"]["jobs_acked"] == cfg.jobs, detail
    if pg_server.is_embedded:
        assert restarts == ["restarted"], detail  # the embedded server is ours: restarted for real
    elif restarts != ["restarted"]:
        message = ("PostgreSQL was NOT restarted: the external server's sessions were only terminated "
                   "(set DL_TEST_RESTART_CMD to restart it for real)")
        print(message)
        assert os.environ.get("DL_TEST_REQUIRE_RESTART") != "1", message
        warnings.warn(message, stacklevel=1)
    # the chaos really happened: the kills made the reaper hand work back
    assert report["counts"]["requeues_by_reason"].get("lease_expired", 0) > 0, detail
