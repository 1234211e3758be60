"""Bulk operations over workflow runs found by search (docs/operations.md, docs/workflows.md),
against a real PostgreSQL: a dry run counts by status and writes nothing; a bulk cancel reaches the
running children of each run and their joins count them; a bulk restart from a step over 50 failed
runs with fixed code resumes each from that step (the probe table, outside the engine, counts every
real execution); runs not ended are skipped and counted; a retry resumes from the failed step;
progress is visible batch by batch; and the node running the operation killed with -9 mid-way (real
`dataloader worker` processes): another node finishes it and no run was restarted twice."""

from __future__ import annotations

import signal
import uuid
from collections.abc import AsyncIterator

import asyncpg
import pytest

from dataloader import App
from dataloader.exceptions import ValidationFailed
from dataloader.storage.operation_repository import TRANSIENT, OperationRepository
from dataloader.workflows.bulk import bulk_run_changer
from tests.conftest import wait_until
from tests.workflows.conftest import workflow_settings
from tests.workflows.flows import FIXED_DDL, PROBE_DDL, QUEUE

TRANSIENT_TRIES = 5

FAST = {"heartbeat_sec": 0.3, "reaper_period_sec": 0.5, "poll_fallback_sec": 1}
FAST_RUNNER = {"operations_period_sec": 0.1, "operations_lease_sec": 2}


@pytest.fixture
async def bdb(db: asyncpg.Pool) -> AsyncIterator[asyncpg.Pool]:
    for ddl in (PROBE_DDL, FIXED_DDL):
        await db.execute(ddl)
    await db.execute("TRUNCATE wf_probe, wf_fixed, dl_operations, dl_operation_events")
    await db.execute("DELETE FROM dl_jobs WHERE queue = $1", QUEUE)
    yield db


@pytest.fixture
async def app(bdb: asyncpg.Pool, dsn: str) -> AsyncIterator[App]:
    # no runner here: the tests drive batches themselves, or start a node that runs one
    async with App(workflow_settings(dsn, operations_enabled=False)) as opened:
        yield opened


async def failed_runs(app: App, bdb: asyncpg.Pool, dsn: str, n: int, *, waiting: int = 0) -> list[uuid.UUID]:
    """n runs of t.bulkfix failed at step two (its code broken), and `waiting` more waiting for a
    signal after step one (not ended); returns the failed ones."""
    async with app.running():
        runs = [await app.workflows.start("t.bulkfix", {"dsn": dsn}) for _ in range(n)]
        others = [await app.workflows.start("t.bulkfix", {"dsn": dsn, "wait": True}) for _ in range(waiting)]
        await wait_until(lambda: _count(bdb, "SELECT count(*) FROM dl_jobs WHERE job_id = ANY($1) AND status = "
                                             "'failed'", runs, n), timeout=60, message="the runs to fail")
        await wait_until(lambda: _count(bdb, "SELECT count(*) FROM dl_workflow_steps WHERE run_id = ANY($1) AND "
                                             "kind = 'wait'", others, waiting), timeout=60,
                         message="the other runs to wait")
    return runs


async def _count(pool: asyncpg.Pool, query: str, ids: list[uuid.UUID], want: int) -> bool:
    return await pool.fetchval(query, ids) == want


async def executions(pool: asyncpg.Pool, run_ids: list[uuid.UUID]) -> dict[str, set[int]]:
    """For each step, the set of per-run execution counts seen (one value: every run alike)."""
    rows = await pool.fetch("SELECT run_id, step, count(*) AS n FROM wf_probe WHERE run_id = ANY($1) "
                            "GROUP BY run_id, step", [str(r) for r in run_ids])
    seen: dict[str, set[int]] = {}
    for r in rows:
        seen.setdefault(r["step"], set()).add(r["n"])
    return seen


async def snapshot(pool: asyncpg.Pool) -> tuple:
    return (await pool.fetch("SELECT job_id, status::text, attempt, cancel_requested, available_at FROM dl_jobs "
                             "ORDER BY job_id"),
            await pool.fetchval("SELECT count(*) FROM dl_job_events"),
            await pool.fetch("SELECT run_id, seq, state FROM dl_workflow_steps ORDER BY run_id, seq"),
            await pool.fetchval("SELECT count(*) FROM dl_operations"),
            await pool.fetchval("SELECT count(*) FROM dl_operation_events"))


async def work_one_batch(pool: asyncpg.Pool, operation_id: uuid.UUID, owner: str = "test-node"):
    """One batch of the operation, as a runner does it (claim, then one batch)."""
    repo = OperationRepository(pool)
    claimed = await repo.claim(owner, 30)
    assert claimed is not None and claimed["operation_id"] == operation_id
    return await _batch(repo, operation_id, owner, claimed["lease_epoch"])


async def _batch(repo: OperationRepository, operation_id: uuid.UUID, owner: str, epoch: int):
    """One batch; a transient error rolled it back whole and it is tried again, as the runner does
    after its pause (a full suite's run saw a deadlock between a batch's cancel and another
    transaction updating the same running jobs, whose multi-row updates lock in id order)."""
    change = bulk_run_changer(max_args_bytes=256 * 1024, default_lease_ttl_sec=60)
    for _ in range(TRANSIENT_TRIES - 1):
        try:
            return await repo.run_workflow_batch(operation_id, owner, epoch, 30, change)
        except TRANSIENT:
            continue
    return await repo.run_workflow_batch(operation_id, owner, epoch, 30, change)


async def test_a_dry_run_counts_by_status_with_a_sample_and_writes_nothing(app, bdb, dsn):
    runs = await failed_runs(app, bdb, dsn, 3, waiting=2)
    before = await snapshot(bdb)
    dry = await app.workflows.restart_many({"workflow": "t.bulkfix"}, "two", dry_run=True)
    assert dry.total == 5 and dry.by_status == {"failed": 3, "queued": 2}
    assert dry.kind == "workflow_restart" and dry.params == {"from_step": "two"}
    assert len(dry.sample) == 5 and {s["run_id"] for s in dry.sample} >= {str(r) for r in runs}
    only_failed = await app.workflows.cancel_many({"workflow": "t.bulkfix", "statuses": ["failed"]}, dry_run=True)
    assert (only_failed.total, only_failed.by_status) == (3, {"failed": 3})
    retry = await app.workflows.retry_many({"statuses": ["queued"], "top_level": True}, dry_run=True)
    assert retry.total == 2
    nothing = await app.workflows.cancel_many({"workflow": "t.no-such"}, dry_run=True)
    assert (nothing.total, nothing.by_status, nothing.sample) == (0, {}, [])
    assert await snapshot(bdb) == before  # jobs, journal, history and operations: untouched


async def test_bad_selections_are_refused_and_write_nothing(app, bdb):
    before = await snapshot(bdb)
    for call, message in [
        (app.workflows.cancel_many({"statuses": ["sleeping"]}), "filter statuses"),
        (app.workflows.cancel_many({"created_from": "yesterday"}), "filter created_from"),
        (app.workflows.cancel_many({"created_from": "2030-01-02T00:00:00Z", "created_to": "2030-01-01T00:00:00Z"}),
         "created_from must be before created_to"),
        (app.workflows.cancel_many({"workflow": "no spaces"}), "filter workflow"),
        (app.workflows.cancel_many({"queue": "wf"}), "filter queue"),
        (app.workflows.restart_many({}, ""), "from_step"),
        (app.workflows.restart_many({}, 42), "from_step"),  # type: ignore[arg-type]
        (app.workflows.restart_many({}, "x" * 201), "from_step"),
    ]:
        with pytest.raises(ValidationFailed, match=message):
            await call
    assert await snapshot(bdb) == before


async def test_bulk_cancel_reaches_running_children_and_their_joins_count_them(app, bdb, dsn):
    async with app.running():
        parents = [await app.workflows.start("t.gather", {"dsn": dsn, "modes": ["hold", "hold"]}) for _ in range(3)]
        children_running = "SELECT count(*) FROM wf_probe WHERE step LIKE 'hold-%' AND run_id IN " \
                           "(SELECT run_id::text FROM dl_workflow_runs WHERE parent_run_id = ANY($1))"
        await wait_until(lambda: _count(bdb, children_running, parents, 6), timeout=60,
                         message="every child to be running its lingering step")
        children = [r["run_id"] for r in await bdb.fetch(
            "SELECT run_id FROM dl_workflow_runs WHERE parent_run_id = ANY($1)", parents)]
        assert len(children) == 6
        # top-level runs only: each child is reached through its parent's cancel, as the single cancel does
        op = await app.workflows.cancel_many({"workflow": "t.gather", "top_level": True}, started_by="test",
                                             batch_size=2)
        assert op.total == 3
        first = await work_one_batch(bdb, op.id)
        assert (first.examined, first.changed, first.finished) == (2, 2, False)
        mid = await app.operations.get(op.id)
        assert (mid.state, mid.done, mid.changed, mid.total) == ("running", 2, 2, 3)  # progress, mid-way
        rest = await work_one_batch_again(bdb, op.id)
        assert (rest.examined, rest.changed, rest.finished) == (1, 1, True)
        # the running children stop at their next await: each ends canceled, and its end counts down
        # its parent's join in the same transaction
        await wait_until(lambda: _count(bdb, "SELECT count(*) FROM dl_jobs WHERE job_id = ANY($1) AND status = "
                                             "'canceled'", children, 6), timeout=60, message="the children to end")
    final = await app.operations.get(op.id)
    assert (final.state, final.done, final.changed, final.skipped, final.failed) == ("finished", 3, 3, 0, 0)
    assert {(await app.workflows.get(p)).status for p in parents} == {"canceled"}
    joins = await bdb.fetch("SELECT remaining FROM dl_workflow_steps WHERE run_id = ANY($1) AND kind = 'gather'",
                            parents)
    assert [r["remaining"] for r in joins] == [0, 0, 0]  # every join counted both children, once
    assert await bdb.fetchval("SELECT count(*) FROM dl_workflow_runs WHERE run_id = ANY($1) AND joined",
                              children) == 6
    # a second bulk cancel finds them all ended: skipped, nothing changed
    again = await app.workflows.cancel_many({"workflow": "t.gather"}, batch_size=100)
    done = await work_one_batch(bdb, again.id)
    assert (done.examined, done.changed) == (3, 0)
    assert (await app.operations.get(again.id)).skipped == 3


async def work_one_batch_again(pool: asyncpg.Pool, operation_id: uuid.UUID, owner: str = "test-node"):
    """The next batch under the lease the first batch renewed (the same owner and epoch)."""
    repo = OperationRepository(pool)
    epoch = await pool.fetchval("SELECT lease_epoch FROM dl_operations WHERE operation_id = $1", operation_id)
    return await _batch(repo, operation_id, owner, epoch)


async def test_bulk_restart_from_a_step_over_50_failed_runs_resumes_each_there(app, bdb, dsn):
    runs = await failed_runs(app, bdb, dsn, 50, waiting=2)
    assert await executions(bdb, runs) == {"one": {1}, "two": {1}}
    await bdb.execute("INSERT INTO wf_fixed VALUES (true)")  # the fixed code is deployed
    op = await app.workflows.restart_many({"workflow": "t.bulkfix"}, "two", started_by="test", batch_size=20)
    assert op.total == 52
    seen: list[tuple[int, int, int]] = []
    while True:
        batch = await (work_one_batch(bdb, op.id) if not seen else work_one_batch_again(bdb, op.id))
        now = await app.operations.get(op.id)
        seen.append((now.done, now.changed, now.skipped))
        if batch.finished:
            break
    assert seen[:2] == [(20, 20, 0), (40, 40, 0)]  # progress visible batch by batch
    final = await app.operations.get(op.id)
    assert (final.state, final.total, final.done, final.changed, final.skipped, final.failed) == (
        "finished", 52, 52, 50, 2, 0)
    trail = [e for e in await app.operations.events(op.id) if e.kind == "skipped"]
    skipped = [s for e in trail for s in e.payload["runs"]]
    assert len(skipped) == 2 and {s["outcome"] for s in skipped} == {"skipped"}
    assert all("JobNotRetryable" in s["reason"] for s in skipped)
    async with app.running():
        for run_id in runs:
            assert await app.workflows.result(run_id, timeout=60) == {"one": 1, "two": 2, "three": 1}
    # step one never ran again; step two ran once broken and once fixed; three once
    assert await executions(bdb, runs) == {"one": {1}, "two": {2}, "three": {1}}


async def test_a_bulk_retry_resumes_from_the_failed_step_and_a_missing_step_is_failed(app, bdb, dsn):
    runs = await failed_runs(app, bdb, dsn, 4)
    missing = await app.workflows.restart_many({"workflow": "t.bulkfix"}, "no-such-step", batch_size=10)
    batch = await work_one_batch(bdb, missing.id)
    assert (batch.examined, batch.changed, batch.failed) == (4, 0, 4)
    refused = await app.operations.get(missing.id)
    assert (refused.done, refused.changed, refused.skipped, refused.failed) == (4, 0, 0, 4)
    assert {(await app.workflows.get(r)).status for r in runs} == {"failed"}  # nothing changed
    await bdb.execute("INSERT INTO wf_fixed VALUES (true)")
    op = await app.workflows.retry_many({"workflow": "t.bulkfix", "statuses": ["failed"]}, batch_size=10)
    batch = await work_one_batch(bdb, op.id)
    assert (batch.examined, batch.changed, batch.finished) == (4, 4, True)
    async with app.running():
        for run_id in runs:
            assert await app.workflows.result(run_id, timeout=60) == {"one": 1, "two": 2, "three": 1}
    assert await executions(bdb, runs) == {"one": {1}, "two": {2}, "three": {1}}


@pytest.mark.timeout(240)
async def test_kill_9_of_the_node_mid_restart_another_node_finishes_and_nothing_runs_twice(
        app, bdb, dsn, workers, subprocess_env):
    """Real `dataloader worker` nodes run both the operation and the runs. The first is killed with
    -9 while the operation is half done; the second takes it over when its lease runs out and
    finishes it. Each run was restarted once (one `workflow_restart` journal row) and its steps ran
    as a single restart would have them run."""
    subprocess_env["DL_PIPELINE_MODULES"] = "tests.workflows.flows"
    n = 40
    runs = await failed_runs(app, bdb, dsn, n)
    await bdb.execute("INSERT INTO wf_fixed VALUES (true)")
    victim = workers(queues={"wf-idle": 1}, node_name="node-a", operations_batch_pause_sec=0.2, **FAST,
                     **FAST_RUNNER)
    await victim.wait_ready()
    op = await app.workflows.restart_many({"workflow": "t.bulkfix", "statuses": ["failed"]}, "two",
                                          started_by="test", batch_size=4)
    assert op.total == n

    async def midway() -> bool:
        now = await app.operations.get(op.id)
        return now.lease_owner == "node-a" and now.done >= 12

    await wait_until(midway, timeout=60, message="node-a working the operation")
    victim.signal(signal.SIGKILL)
    assert await victim.wait_exit() == -signal.SIGKILL
    at_kill = await app.operations.get(op.id)
    assert 0 < at_kill.done < n, at_kill
    rescuer = workers(queues={QUEUE: 4}, node_name="node-b", **FAST, **FAST_RUNNER)
    await rescuer.wait_ready()
    final = await app.operations.wait(op.id, timeout=120, interval=0.1)
    assert (final.state, final.total, final.done, final.changed, final.skipped) == ("finished", n, n, n, 0)
    trail = await app.operations.events(op.id)
    takeovers = [e for e in trail if e.kind == "taken_over"]
    assert len(takeovers) == 1 and takeovers[0].payload["previous_owner"] == "node-a"
    for run_id in runs:
        assert await app.workflows.result(run_id, timeout=90) == {"one": 1, "two": 2, "three": 1}
    restarts = await bdb.fetch("SELECT job_id, count(*) AS n FROM dl_job_events WHERE kind = 'workflow_restart' "
                               "AND job_id = ANY($1) GROUP BY job_id", runs)
    assert len(restarts) == n and {r["n"] for r in restarts} == {1}  # each run restarted exactly once
    audited = [run for e in trail if e.kind == "changed" for run in e.payload["runs"]]
    assert sorted(audited) == sorted(str(r) for r in runs)  # each run named once, by the batch that changed it
    assert await executions(bdb, runs) == {"one": {1}, "two": {2}, "three": {1}}


async def test_http_and_the_cli_count_start_and_show_progress_as_python_does(app, bdb, dsn):
    """POST /api/v1/workflows/bulk/{action} (not a run's /{run_id}/cancel: a dry run answers 200 with
    the count) and `dataloader ops restart-workflows` with its progress bar, the operation worked by
    a runner of a node in this process."""
    import asyncio
    import json

    import httpx

    from tests.support.api_apps import api_for
    from tests.support.cli import invoke

    runs = await failed_runs(app, bdb, dsn, 3, waiting=1)
    transport = httpx.ASGITransport(app=api_for(app))
    async with httpx.AsyncClient(transport=transport, base_url="http://bulk") as http:
        dry = await http.post("/api/v1/workflows/bulk/restart", json={
            "filter": {"workflow": "t.bulkfix"}, "from_step": "two", "dry_run": True})
        assert dry.status_code == 200, dry.text
        assert (dry.json()["total"], dry.json()["by_status"]) == (4, {"failed": 3, "queued": 1})
        assert len(dry.json()["sample"]) == 4
        wrong = await http.post("/api/v1/workflows/bulk/retry", json={"from_step": "two"})
        assert wrong.status_code == 422 and wrong.json()["error"] == "validation_error"
        spec = (await http.get("/openapi.json")).json()
        assert "/api/v1/workflows/bulk/{action}" in spec["paths"]
    assert await bdb.fetchval("SELECT count(*) FROM dl_operations") == 0

    await bdb.execute("INSERT INTO wf_fixed VALUES (true)")
    env = {"DL_DB_DSN": dsn}
    preview = await asyncio.to_thread(invoke, ["ops", "restart-workflows", "--workflow", "t.bulkfix",
                                               "--from-step", "two", "--dry-run"], env)
    assert preview.exit_code == 0, preview.output
    assert json.loads(preview.stdout)["by_status"] == {"failed": 3, "queued": 1}
    from dataloader import metrics

    def counted(result: str) -> float:
        return metrics.OPERATION_JOBS.labels("workflow_restart", result)._value.get()

    before = {r: counted(r) for r in ("changed", "skipped", "failed")}
    async with App(workflow_settings(dsn, **FAST_RUNNER)) as node, node.running():
        done = await asyncio.to_thread(invoke, ["ops", "restart-workflows", "--workflow", "t.bulkfix",
                                                "--from-step", "two", "--yes", "--batch-size", "2"], env)
        assert done.exit_code == 0, done.output
        final = json.loads(done.stdout)
        assert (final["kind"], final["state"], final["total"], final["done"]) == ("workflow_restart", "finished", 4, 4)
        assert (final["changed"], final["skipped"], final["failed"]) == (3, 1, 0)
        assert "workflow_restart" in done.stderr and "skipped=1" in done.stderr  # the progress bar's line
        # the operations' counters, labelled by kind
        assert {r: counted(r) - before[r] for r in before} == {"changed": 3, "skipped": 1, "failed": 0}
        for run_id in runs:
            assert await node.workflows.result(run_id, timeout=60) == {"one": 1, "two": 2, "three": 1}


def _sync_bulk(dsn: str) -> tuple[object, object]:
    from dataloader import SyncApp

    with SyncApp(workflow_settings(dsn, operations_enabled=False)) as sync:
        dry = sync.workflows.retry_many({"workflow": "t.bulkfix", "statuses": ["failed"]}, dry_run=True)
        op = sync.workflows.cancel_many({"workflow": "t.bulkfix", "statuses": ["queued"]}, started_by="sync")
        with pytest.raises(ValidationFailed, match="from_step"):
            sync.workflows.restart_many({}, "")
        return dry, op


async def test_sync_app_counts_and_starts_a_bulk_operation(app, bdb, dsn):
    import asyncio

    await failed_runs(app, bdb, dsn, 2, waiting=1)
    dry, op = await asyncio.to_thread(_sync_bulk, dsn)
    assert (dry.kind, dry.total, dry.by_status) == ("workflow_retry", 2, {"failed": 2})
    # 50 runs a batch unless told: each run is a savepoint, kept under PostgreSQL's 64 cached subtransactions
    assert (op.kind, op.total, op.state, op.started_by, op.batch_size) == ("workflow_cancel", 1, "running", "sync", 50)
