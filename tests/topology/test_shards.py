"""Queues on several databases (issue 22 "Past one primary", docs/scaling.md): DL_SHARDS_JSON maps
queues to shards; each shard is a whole dataloader database. Two databases on the test server
stand in for two clusters here (each has its own migrations, pools, LISTEN and duties either
way); test_a_node_serving_two_servers_loses_nothing_when_one_restarts uses two real servers."""

from __future__ import annotations

import asyncio
import itertools
import json
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

import asyncpg
import httpx
import pytest

from dataloader import App, Queue, Settings, SyncApp
from dataloader.api import create_app
from dataloader.config import load_settings
from dataloader.exceptions import ConfigError, JobNotFound, ValidationFailed
from dataloader.workers.pipelines.registry import PipelineRegistry
from tests.conftest import wait_until
from tests.support.cli import run
from tests.support.database import TestServer as PgServer
from tests.support.database import create_database, drop_database, restart_server, with_database

# job id -> (database it ran in, start, end); lock_key -> runs
RAN: dict[uuid.UUID, tuple[str, float, float]] = {}


async def where(ctx: Any) -> None:
    start = time.monotonic()
    await asyncio.sleep(float(ctx.args.get("sleep", 0)))
    # The job's transaction commits with its finish (the lock_key is free after it): the end is
    # taken inside it.
    async with ctx.transaction() as conn:
        database = await conn.fetchval("SELECT current_database()")
        RAN[ctx.job_id] = (database, start, time.monotonic())


def registry() -> PipelineRegistry:
    reg = PipelineRegistry()
    reg.register("shard.where", where)
    return reg


@pytest.fixture
async def two_databases(pg_server) -> AsyncIterator[tuple[str, str]]:
    """Two fresh databases, never migrated: the App's start migrates each shard."""
    a, b = await create_database(pg_server), await create_database(pg_server)
    yield a, b
    await drop_database(pg_server, a)
    await drop_database(pg_server, b)


def db_name(dsn: str) -> str:
    from urllib.parse import urlsplit

    return urlsplit(dsn).path.lstrip("/")


async def rows(dsn: str, query: str, *args: Any) -> list[asyncpg.Record]:
    conn = await asyncpg.connect(dsn)
    try:
        return await conn.fetch(query, *args)
    finally:
        await conn.close()


def sharded(a: str, b: str, *workers: Queue, **extra: Any) -> App:
    return App(Settings(db_dsn=a, workers=list(workers), **extra), pipelines=registry(),
               shards={"b": {"dsn": b, "queues": ["qb"]}})


async def test_each_queue_lands_and_runs_on_its_shard_and_every_face_finds_it(two_databases):
    a, b = two_databases
    app = await sharded(a, b, Queue("qa", 2), Queue("qb", 2)).open(migrate_schema=True)
    try:
        assert (app.shard_of("qa"), app.shard_of("qb")) == ("default", "b")
        # A shard's pool has a connection for every worker of its own queues (and the spare ones).
        assert app.db.shards["b"].max_connections() == 2 + app.settings.db_pool_extra
        ja = await app.enqueue("shard.where", {}, queue="qa")
        jb = await app.enqueue("shard.where", {}, queue="qb")
        batch = await app.enqueue_many([{"task": "shard.where", "queue": q} for q in ("qb", "qa", "qb", "qa")])
        assert len(batch) == 4
        # Each row is in its shard's database only, journal with it.
        on_a = {r["id"] for r in await rows(a, "SELECT job_id AS id FROM dl_jobs")}
        on_b = {r["id"] for r in await rows(b, "SELECT job_id AS id FROM dl_jobs")}
        assert on_a == {ja.id, batch[1], batch[3]} and on_b == {jb.id, batch[0], batch[2]}
        assert {r["job_id"] for r in await rows(b, "SELECT job_id FROM dl_job_events")} == on_b

        # Lists merge the shards newest first, by pages; depths name the shard.
        page = await app.list(limit=4)
        everything = [*await rows(a, "SELECT job_id, created_at FROM dl_jobs"),
                      *await rows(b, "SELECT job_id, created_at FROM dl_jobs")]
        newest = [r["job_id"] for r in sorted(everything, key=lambda r: (r["created_at"], r["job_id"]), reverse=True)]
        assert [j.id for j in page.jobs] == newest[:4]
        rest = await app.list(limit=4, cursor=page.next_cursor)
        assert {j.id for j in page.jobs + rest.jobs} == on_a | on_b and rest.next_cursor is None
        depths = {(d.queue, d.shard): d.queued for d in await app.queue_depths()}
        assert depths == {("qa", "default"): 3, ("qb", "b"): 3}
        found = await app.search({"queues": ["qa", "qb"]}, limit=10, count=True)
        assert found.count == 6 and len(found.jobs) == 6
        assert await app.count_jobs({"queues": ["qb"]}) == 3

        # A paused queue pauses on its shard.
        await app.pause_queue("qb")
        assert [r["queue"] for r in await rows(b, "SELECT queue FROM dl_queue_flow WHERE paused")] == ["qb"]
        assert not await rows(a, "SELECT queue FROM dl_queue_flow WHERE paused")
        await app.resume_queue("qb")

        async with app.running():
            await wait_until(lambda: all(i in RAN for i in on_a | on_b), timeout=20, message="all ran")
        assert {RAN[i][0] for i in on_a} == {db_name(a)} and {RAN[i][0] for i in on_b} == {db_name(b)}
        got = await app.get(jb.id)
        assert got.status == "succeeded" and got.queue == "qb"
        assert [e.kind for e in await app.events(jb.id)][-1] == "done"

        # The API's own App (`dataloader serve`) opens every shard on its own pools.
        api = await app.api_app()
        try:
            assert (await api.get(jb.id)).status == "succeeded" and len((await api.list(limit=10)).jobs) == 6
        finally:
            await api.close()

        # cancel by id on either shard
        later = await app.enqueue("shard.where", {}, queue="qb", delay=3600)
        assert (await app.cancel(later.id)).status == "canceled"
        with pytest.raises(JobNotFound):
            await app.get(uuid.uuid4())
    finally:
        await app.close()


async def test_a_lock_key_holds_within_its_shard(two_databases):
    a, b = two_databases
    app = await sharded(a, b, Queue("qb", 4)).open(migrate_schema=True)
    try:
        ids = [(await app.enqueue("shard.where", {"sleep": 0.05}, queue="qb", lock_key="k")).id for _ in range(6)]
        async with app.running():
            await wait_until(lambda: all(i in RAN for i in ids), timeout=20, message="all ran")
        runs = sorted((RAN[i][1], RAN[i][2]) for i in ids)
        assert all(end <= start for (_, end), (start, _) in itertools.pairwise(runs)), runs
    finally:
        await app.close()


async def test_http_trigger_batch_status_cancel_depths_and_schedules(two_databases):
    a, b = two_databases
    app = await sharded(a, b).open(migrate_schema=True)
    try:
        transport = httpx.ASGITransport(app=create_app(app.settings, context=app))
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
            one = await client.post("/api/v1/jobs/trigger", json={"task": "shard.where", "queue": "qb",
                                                                   "available_at": "2100-01-01T00:00:00Z"})
            assert one.status_code in (200, 201), one.text
            job_id = one.json()["job_id"]
            assert [r["queue"] for r in await rows(b, "SELECT queue FROM dl_jobs")] == ["qb"]
            many = await client.post("/api/v1/jobs/batch", json={"jobs": [
                {"task": "shard.where", "queue": "qa"}, {"task": "shard.where", "queue": "qb"}]})
            assert many.status_code in (200, 201), many.text
            ids = many.json()["job_ids"]
            assert [str(r["id"]) for r in await rows(a, "SELECT job_id AS id FROM dl_jobs")] == [ids[0]]
            status = await client.get(f"/api/v1/jobs/{job_id}/status")
            assert status.status_code == 200 and status.json()["status"] == "queued"
            canceled = await client.post(f"/api/v1/jobs/{job_id}/cancel")
            assert canceled.status_code == 200 and canceled.json()["status"] == "canceled"
            assert (await client.get(f"/api/v1/jobs/{uuid.uuid4()}/status")).status_code == 404
            depths = (await client.get("/api/v1/stats/depths")).json()["queues"]
            assert {(d["queue"], d["shard"]) for d in depths} == {("qa", "default"), ("qb", "b")}
            metrics = (await client.get("/metrics")).text
            assert 'dl_queue_jobs{queue="qb",status="queued"} 1.0' in metrics, metrics[:3000]
            overview = await client.get("/ui/")
            assert overview.status_code == 200 and '<small class="shard">shard b</small>' in overview.text
            paused = await client.post("/api/v1/queues/qb/pause")
            assert paused.status_code == 200 and paused.json()["paused"] is True
            listed = {q["queue"]: q["paused"] for q in (await client.get("/api/v1/queues")).json()["queues"]}
            assert listed["qb"] is True
            schedule = await client.post("/api/v1/schedules", json={
                "name": "s", "task": "shard.where", "queue": "qb", "cron": "* * * * *"})
            assert schedule.status_code == 422, schedule.text
            assert "lives on shard 'b'" in schedule.json()["detail"]
    finally:
        await app.close()
    with pytest.raises(ValidationFailed):  # the same rule in Python
        async with sharded(a, b) as again:
            await again.schedules.create(again.schedules.spec(name="s", task="shard.where", queue="qb",
                                                              cron="* * * * *"))


def test_the_cli_reads_and_lists_across_shards(two_databases) -> None:
    a, b = two_databases
    env = {"DL_DB_DSN": a, "DL_SHARDS_JSON": json.dumps({"b": {"dsn": b, "queues": ["qb"]}})}
    made = run(["jobs", "trigger", "--task", "shard.where", "--queue", "qb", "--args", "{}"], env)
    assert made.returncode == 0, made.stderr
    job_id = json.loads(made.stdout)["job_id"]
    assert [str(r["id"]) for r in asyncio.run(rows(b, "SELECT job_id AS id FROM dl_jobs"))] == [job_id]
    status = run(["jobs", "status", job_id], env)
    assert status.returncode == 0 and json.loads(status.stdout)["status"] == "queued", status.stderr
    listed = run(["jobs", "list"], env)
    assert listed.returncode == 0 and job_id in listed.stdout, listed.stderr
    depths = run(["queues", "depths"], env)
    assert depths.returncode == 0 and '"shard": "b"' in depths.stdout.replace('":"', '": "'), depths.stdout


BAD = [
    ('{"b": {"dsn": "mysql://x/b"}}', "DL_SHARDS_JSON: shard 'b': dsn must be a postgresql:// URL"),
    ('{"b": {"dsn": "postgresql://x/b", "queues": ["q"]}, "c": {"dsn": "postgresql://x/c", "queues": ["q"]}}',
     "DL_SHARDS_JSON: queue 'q' is on two shards ('b' and 'c')"),
    ('{"default": {"dsn": "postgresql://x/b"}}', "DL_SHARDS_JSON: shard 'default': the name of DL_DB_DSN's shard"),
    ('{"b": {"dsn": "postgresql://x/b", "queue": ["q"]}}', "DL_SHARDS_JSON: shard 'b': unknown key 'queue'"),
    ('{"b": {"dsn": "postgresql://x/b", "queues": ["process:p"]}}', "is a process queue"),
    ('{"b": ', "DL_SHARDS_JSON: is not valid JSON"),
    ('{"B!": {"dsn": "postgresql://x/b"}}', "a shard name is 1 to 63 of a-z"),
]


@pytest.mark.parametrize(("value", "said"), BAD)
def test_bad_shard_settings_are_one_line_everywhere(value: str, said: str, dsn: str) -> None:
    with pytest.raises(ConfigError) as err:
        load_settings(db_dsn=dsn, shards_json=value)
    assert said in str(err.value)
    with pytest.raises(ConfigError) as err:
        App(Settings(db_dsn=dsn), shards=json.loads(value) if value.endswith("}") else value)
    assert said.removeprefix("DL_SHARDS_JSON: ") in str(err.value)
    done = run(["jobs", "list"], {"DL_DB_DSN": dsn, "DL_SHARDS_JSON": value})
    assert done.returncode == 2, done.stderr
    lines = [line for line in done.stderr.splitlines() if line.startswith("dataloader:")]
    assert len(lines) == 1 and said in lines[0] and "Traceback" not in done.stderr, done.stderr


async def test_the_same_database_twice_and_an_unreachable_shard_are_refused(two_databases):
    a, b = two_databases
    with pytest.raises(ConfigError, match="the same dsn as DL_DB_DSN"):
        App(Settings(db_dsn=a), shards={"b": {"dsn": a}})
    missing = with_database(b, "dl_no_such_database")
    with pytest.raises(ConfigError, match=r"DL_SHARDS_JSON\[b\]\.dsn"):
        await App(Settings(db_dsn=a), shards={"b": {"dsn": missing}}).open(migrate_schema=True)


async def test_one_shard_costs_nothing_extra(dsn, db):
    app = await App(Settings(db_dsn=dsn, workers=[Queue("q", 2)])).open()
    try:
        assert type(app.jobs).__name__ == "JobManager" and type(app.flow).__name__ == "FlowManager"
        assert app.db.shards == {} and app.connections_budget() == 2 + app.settings.db_pool_extra
    finally:
        await app.close()


@pytest.fixture
async def second_server(server_dir) -> AsyncIterator[tuple[PgServer, str]]:
    """Another PostgreSQL server (embedded, its own data directory and postmaster) and a database on it."""
    from dataloader.storage.embedded import EmbeddedPostgres

    embedded = EmbeddedPostgres(server_dir / "pgdata", remove_on_stop=True)
    admin_dsn = await asyncio.to_thread(embedded.start)
    server = PgServer(admin_dsn=admin_dsn, embedded=embedded, data_dir=server_dir / "pgdata")
    dsn = await create_database(server)
    yield server, dsn
    await asyncio.to_thread(embedded.stop)


@pytest.mark.process  # pg_ctl restarts the second server
async def test_a_node_serving_two_servers_loses_nothing_when_one_restarts(dsn, db, second_server):
    """Queue qa on the suite's server, qb on a second server; the node serves both. The second
    server restarts while both queues drain: qa's jobs go on finishing during its downtime, and
    every job of both ends succeeded (qb's resume after the restart, on their own shard)."""
    server_b, dsn_b = second_server
    app = await App(Settings(db_dsn=dsn, workers=[Queue("qa", 2), Queue("qb", 2)]), pipelines=registry(),
                    shards={"b": {"dsn": dsn_b, "queues": ["qb"]}}).open(migrate_schema=True)
    try:
        qa = await app.enqueue_many([{"task": "shard.where", "queue": "qa", "args": {"sleep": 0.02}}] * 300)
        qb = await app.enqueue_many([{"task": "shard.where", "queue": "qb", "args": {"sleep": 0.02}}] * 100)
        async with app.running():
            await wait_until(lambda: sum(i in RAN for i in qb) >= 10, timeout=30, message="qb runs")
            qa_before = sum(i in RAN for i in qa)
            assert await restart_server(server_b, dsn_b) == "restarted"
            qa_during = sum(i in RAN for i in qa) - qa_before
            await wait_until(lambda: all(i in RAN for i in qa + qb), timeout=90, message="every job ran")

            # A job whose finish the restart cut off ran (RAN is written before the commit) but
            # is queued for another attempt: every job ends succeeded, not at once.
            async def all_succeeded() -> bool:
                page = await app.search({"queues": ["qa", "qb"], "statuses": ["succeeded"]}, limit=1, count=True)
                return page.count == 400

            await wait_until(all_succeeded, timeout=90, message="every job of both shards succeeded")
        assert qa_during > 0, "qa stopped while the other shard's server restarted"
        assert {RAN[i][0] for i in qb} == {db_name(dsn_b)} and {RAN[i][0] for i in qa} == {db_name(dsn)}
    finally:
        await app.close()


@pytest.mark.process
async def test_worker_processes_drain_both_shards_and_a_sync_app_enqueues_by_queue(two_databases, workers):
    a, b = two_databases
    shards = {"b": {"dsn": b, "queues": ["qb"]}}
    await (await App(Settings(db_dsn=a, workers=[]), shards=shards).open(migrate_schema=True)).close()
    sync = SyncApp(Settings(db_dsn=a, workers=[]), shards=shards)
    with sync:
        ids = [sync.enqueue("dl.noop", {}, queue=q).id for q in ("qa", "qb", "qa", "qb")]
        assert sync.get(ids[1]).queue == "qb"
    assert len(await rows(b, "SELECT 1 FROM dl_jobs")) == 2 and len(await rows(a, "SELECT 1 FROM dl_jobs")) == 2
    worker = workers(queues={"qa": 1, "qb": 1}, db_dsn=a, shards_json=json.dumps(shards))
    await worker.wait_ready()

    async def done() -> bool:
        statuses = [r["status"] for dsn in (a, b) for r in await rows(dsn, "SELECT status FROM dl_jobs")]
        return statuses == ["succeeded"] * 4

    deadline = time.monotonic() + 30
    while not await done():
        assert time.monotonic() < deadline, worker.log()
        await asyncio.sleep(0.1)


async def test_a_bulk_operation_runs_on_the_shard_of_its_queues(two_databases):
    a, b = two_databases
    app = await sharded(a, b, Queue("qa", 1), Queue("qb", 1)).open(migrate_schema=True)
    try:
        later = [(await app.enqueue("shard.where", {}, queue=q, delay=3600)).id for q in ("qa", "qb", "qb")]
        with pytest.raises(ValidationFailed, match="one operation acts on one shard"):
            await app.operations.start("cancel", {"queues": ["qa", "qb"]})
        dry = await app.operations.start("cancel", {"queues": ["qb"]}, dry_run=True)
        assert dry.total == 2
        async with app.running():
            op = await app.operations.start("cancel", {"queues": ["qb"]}, started_by="test")
            assert (await app.operations.wait(op.id, timeout=30)).state == "finished"
        assert [o.id for o in (await app.operations.list())[0]] == [op.id]
        assert [e.kind for e in await app.operations.events(op.id)]
        assert [(await app.get(i)).status for i in later] == ["queued", "canceled", "canceled"]
        assert len(await rows(b, "SELECT 1 FROM dl_operations")) == 1
        assert not await rows(a, "SELECT 1 FROM dl_operations")
    finally:
        await app.close()


async def test_a_tasks_limits_live_on_its_queues_shard(two_databases):
    """`@pipeline(limits=...)` is declared in the database of each queue a node serves, and a run-time
    change of a task's limits goes to its queue's shard (the claims that read them are there)."""
    a, b = two_databases
    reg = registry()
    reg.register("shard.limited", where, limits={"concurrency": 2})
    app = await App(Settings(db_dsn=a, workers=[Queue("qa", 1), Queue("qb", 1)]), pipelines=reg,
                    shards={"b": {"dsn": b, "queues": ["qb"]}}).open(migrate_schema=True)
    try:
        async with app.running():
            pass
        query = "SELECT queue, concurrency FROM dl_task_flow WHERE task = 'shard.limited' ORDER BY queue"
        assert [tuple(r) for r in await rows(a, query)] == [("qa", 2)]
        assert [tuple(r) for r in await rows(b, query)] == [("qb", 2)]
        await app.configure_task("qb", "shard.limited", concurrency=5)
        assert [tuple(r) for r in await rows(b, query)] == [("qb", 5)]
        assert [tuple(r) for r in await rows(a, query)] == [("qa", 2)]
        flows = {f.queue: f for f in await app.queues()}
        assert flows["qb"].task_limits["shard.limited"].settings.concurrency == 5
    finally:
        await app.close()
