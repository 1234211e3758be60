"""The journal partitioned by time (migration 0039, retention/partitions.py) on a real PostgreSQL:
the migration on an empty database, on one with rows and on a hand-applied 003 schema, and its
downgrade; partitions created ahead; a drop that keeps the history of the jobs still kept (queued,
running, finished within a longer age, held) with their own ts and event_id; an insert no range
covers landing in the DEFAULT partition; the foreign key and its cascade; the pruner waiting for
the drop so its cascade finds nothing. Each test that changes partitions has a database of its own."""

from __future__ import annotations

import importlib
import itertools
import uuid
from datetime import UTC, datetime, timedelta

import asyncpg
import pytest

from dataloader import Settings
from dataloader.retention import partitions as parts
from dataloader.retention.policy import RetentionPolicy
from dataloader.retention.pruner import prune
from dataloader.storage import migrate
from tests.retention.rows import add_job, exists
from tests.support.database import create_database, drop_database

spec = importlib.import_module("dataloader.storage.migrations.versions.0001_spec_schema")
DAY = 86400.0


@pytest.fixture
async def fresh(pg_server):
    url = await create_database(pg_server)
    yield url
    await drop_database(pg_server, url)


@pytest.fixture
async def fresh_pool(fresh):
    await migrate.upgrade(fresh)
    pool = await asyncpg.create_pool(fresh, min_size=1, max_size=4)
    try:
        yield pool
    finally:
        await pool.close()


def _to(conn, revision: str, down: bool) -> None:
    from alembic import command

    cfg = migrate.alembic_config()
    cfg.attributes["connection"] = conn
    (command.downgrade if down else command.upgrade)(cfg, revision)
    conn.commit()


async def _move(url: str, revision: str, *, down: bool) -> None:
    from dataloader.storage.db import create_engine

    engine = create_engine(url)
    try:
        async with engine.connect() as conn:
            await conn.run_sync(_to, revision, down)
    finally:
        await engine.dispose()


async def _kinds(conn: asyncpg.Connection) -> dict[str, str]:
    """relkind of the journal and of each of its partitions."""
    rows = await conn.fetch("SELECT c.relname, c.relkind::text FROM pg_class c WHERE c.relname LIKE 'dl_job_events%' "
                            "AND c.relkind IN ('r', 'p')")
    return {r["relname"]: r["relkind"] for r in rows}


async def test_fresh_database_has_a_partitioned_journal_with_legacy_and_default(fresh):
    await migrate.upgrade(fresh)
    conn = await asyncpg.connect(fresh)
    try:
        assert await _kinds(conn) == {"dl_job_events": "p", "dl_job_events_p_legacy": "r",
                                      "dl_job_events_default": "r"}
        pk = await conn.fetchval("SELECT pg_get_constraintdef(oid) FROM pg_constraint "
                                 "WHERE conrelid = 'dl_job_events'::regclass AND contype = 'p'")
        assert pk == "PRIMARY KEY (ts, event_id)"
        fk = await conn.fetchval("SELECT pg_get_constraintdef(oid) FROM pg_constraint "
                                 "WHERE conrelid = 'dl_job_events'::regclass AND contype = 'f'")
        assert fk == "FOREIGN KEY (job_id) REFERENCES dl_jobs(job_id) ON DELETE CASCADE"
        owner = await conn.fetchval("SELECT d.refobjid::regclass::text FROM pg_depend d "
                                    "WHERE d.objid = 'dl_job_events_event_id_seq'::regclass AND d.deptype = 'a'")
        assert owner == "dl_job_events"
        # the foreign key's check holds on the partitioned table: no row of a job that does not exist
        with pytest.raises(asyncpg.ForeignKeyViolationError):
            await conn.execute("INSERT INTO dl_job_events (job_id, queue, kind) VALUES ($1, 'q', 'queued')",
                               uuid.uuid4())
    finally:
        await conn.close()


async def test_hand_applied_ddl_with_rows_is_adopted_and_its_rows_kept_then_goes_down_and_up(fresh):
    """A database where the 003 DDL was applied by hand, with history (one row with an 'infinity'
    ts, as promise 9 allows): migrated to head, every row is still there, readable by job_id and in
    event_id order, the odd one in the DEFAULT partition; down to 0038 the journal is a plain table
    again with its 0001 primary key and every row; up again, partitioned."""
    conn = await asyncpg.connect(fresh)
    try:
        for statement in spec.spec_statements():
            await conn.execute(statement)
        job = uuid.uuid4()
        await conn.execute("INSERT INTO dl_jobs (job_id, queue, task, lock_key) VALUES ($1, 'q', 'dl.noop', 'k')", job)
        for ago in (400 * DAY, 10 * DAY, 0.0):
            await conn.execute("INSERT INTO dl_job_events (job_id, queue, kind, ts) "
                               "VALUES ($1, 'q', 'queued', now() - make_interval(secs => $2))", job, ago)
        await conn.execute("INSERT INTO dl_job_events (job_id, queue, kind, ts) "
                           "VALUES ($1, 'q', 'odd', 'infinity')", job)
        before = await conn.fetch("SELECT event_id, ts, kind FROM dl_job_events ORDER BY event_id")
        # the new key's index built beforehand, online, as docs/scaling.md says for a large journal
        await conn.execute("CREATE UNIQUE INDEX CONCURRENTLY dl_job_events_p_legacy_event_ts "
                           "ON dl_job_events (ts, event_id)")
        prebuilt = await conn.fetchval("SELECT 'dl_job_events_p_legacy_event_ts'::regclass::oid")
    finally:
        await conn.close()
    assert (await migrate.upgrade(fresh))[1] == migrate.head_revision()
    conn = await asyncpg.connect(fresh)
    try:  # reused as the legacy partition's key, not built twice
        indexes = await conn.fetch("SELECT indexrelid::regclass::text AS name, indisprimary FROM pg_index "
                                   "WHERE indrelid = 'dl_job_events_p_legacy'::regclass ORDER BY 1")
        assert [(r["name"], r["indisprimary"]) for r in indexes] == [
            ("dl_job_events_p_legacy_job", False), ("dl_job_events_p_legacy_pkey", True)]
        assert await conn.fetchval("SELECT 'dl_job_events_p_legacy_pkey'::regclass::oid") == prebuilt
    finally:
        await conn.close()

    async def journal() -> tuple[list[asyncpg.Record], dict[str, str], dict[str, int]]:
        conn = await asyncpg.connect(fresh)
        try:
            rows = await conn.fetch("SELECT event_id, ts, kind FROM dl_job_events WHERE job_id = $1 ORDER BY event_id",
                                    job)
            where = {r["p"]: r["n"] for r in await conn.fetch(
                "SELECT tableoid::regclass::text AS p, count(*) AS n FROM dl_job_events GROUP BY 1")}
            return rows, await _kinds(conn), where
        finally:
            await conn.close()

    rows, kinds, where = await journal()
    assert rows == before
    assert kinds["dl_job_events"] == "p"
    assert where == {"dl_job_events_p_legacy": 3, "dl_job_events_default": 1}

    await _move(fresh, "0038_workflow_operations", down=True)
    rows, kinds, where = await journal()
    assert rows == before and kinds == {"dl_job_events": "r"} and where == {"dl_job_events": 4}
    conn = await asyncpg.connect(fresh)
    try:
        pk = await conn.fetchval("SELECT pg_get_constraintdef(oid) FROM pg_constraint "
                                 "WHERE conrelid = 'dl_job_events'::regclass AND contype = 'p'")
        assert pk == "PRIMARY KEY (event_id)"
        new_id = await conn.fetchval("INSERT INTO dl_job_events (job_id, queue, kind) VALUES ($1, 'q', 'x') "
                                     "RETURNING event_id", job)
        assert new_id > max(r["event_id"] for r in before)  # the sequence came back with its table
    finally:
        await conn.close()
    await _move(fresh, "head", down=False)
    rows, kinds, where = await journal()
    assert kinds["dl_job_events"] == "p" and len(rows) == 5
    assert await migrate.database_revision(fresh) == migrate.head_revision()


async def test_partitions_are_created_ahead_and_an_uncovered_insert_lands_in_default(fresh_pool):
    pool = fresh_pool
    now = datetime.now(UTC)
    tick = await parts.create_ahead(pool, now, parts.DAY, 3)
    listed = await parts.list_partitions(pool)
    ranges = [(p.range_from, p.range_to) for p in listed if not p.is_default]
    # the legacy partition ends at the next midnight; three days follow it, contiguous
    assert ranges[0][0] is None
    assert all(a[1] == b[0] for a, b in itertools.pairwise(ranges))
    assert ranges[-1][1] >= now + 3 * parts.DAY
    assert tick.created == [p.name for p in listed if not p.is_default and p.range_from is not None]
    assert tick.created[0] == parts.partition_name(ranges[1][0], parts.DAY)
    # idempotent
    assert (await parts.create_ahead(pool, now, parts.DAY, 3)).created == []
    job = await add_job(pool, status="queued", finished_ago=None)
    await pool.execute("INSERT INTO dl_job_events (job_id, queue, kind, ts) VALUES "
                       "($1, 'q', 'a', now() + interval '1 day'), ($1, 'q', 'b', now() + interval '400 days')", job)
    where = {r["kind"]: r["p"] for r in await pool.fetch(
        "SELECT kind, tableoid::regclass::text AS p FROM dl_job_events WHERE job_id = $1", job)}
    assert where["b"] == "dl_job_events_default"
    assert where["a"].startswith("dl_job_events_p2")
    assert where["queued"] != "dl_job_events_default"  # the legacy partition (or, past midnight, the next)


def _old_range(days_old: float) -> tuple[datetime, datetime]:
    end = parts.floor_boundary(datetime.now(UTC) - timedelta(days=days_old), parts.DAY)
    return end - parts.DAY, end


async def _age_partition(pool: asyncpg.Pool, days_old: float) -> parts.JournalPartition:
    """A range partition of the day that ended `days_old` days ago, placed before the legacy one:
    the legacy partition is detached, its rows from that day on moved out (into the new partition,
    or the DEFAULT one), and it is attached again ending where the new one starts (set-up only)."""
    start, end = _old_range(days_old)
    name = parts.partition_name(start, parts.DAY)
    async with pool.acquire() as conn, conn.transaction():
        await conn.execute("ALTER TABLE dl_job_events DETACH PARTITION dl_job_events_p_legacy")
        await conn.execute("SELECT dl_journal_attach_partition($1, $2, $3)", name, start, end)
        await conn.execute("WITH moved AS (DELETE FROM dl_job_events_p_legacy WHERE ts >= $1 RETURNING *) "
                           "INSERT INTO dl_job_events SELECT * FROM moved", start)
        await conn.execute(f"ALTER TABLE dl_job_events ATTACH PARTITION dl_job_events_p_legacy "
                           f"FOR VALUES FROM (MINVALUE) TO ('{start.isoformat()}')")
    return next(p for p in await parts.list_partitions(pool) if p.name == name)


async def test_a_dropped_partition_keeps_the_history_of_every_job_still_kept(fresh_pool):
    """Jobs with rows in a partition 8 days old: a succeeded job past its 7 days loses them (and is
    then pruned with nothing left to cascade); a queued, a running, a held and a failed one (30
    days) keep every row, with the same event_id and ts, in the DEFAULT partition; a hook sees the
    partition before its drop."""
    pool = fresh_pool
    old = await _age_partition(pool, 8)
    assert old.range_from is not None and old.range_to is not None
    t = (old.range_to - datetime.now(UTC)).total_seconds()  # negative: seconds from now into the partition
    inside = -t + 3600  # an hour before the partition's end, as "seconds ago"
    gone = await add_job(pool, status="succeeded", finished_ago=inside, picked_ago=inside + 10)
    queued = await add_job(pool, status="queued", finished_ago=None, created_ago=inside)
    running = await add_job(pool, status="running", finished_ago=None, picked_ago=inside)
    failed = await add_job(pool, status="failed", finished_ago=inside, picked_ago=inside + 10)
    held = await add_job(pool, status="failed", finished_ago=40 * DAY, picked_ago=inside + 5, created_ago=inside + 20)
    await pool.execute("UPDATE dl_jobs SET held_at = now(), held_reason = 'test' WHERE job_id = $1", held)
    # a long-running job: created in the old partition, finished yesterday, within its 7 days
    long = await add_job(pool, status="succeeded", finished_ago=DAY, picked_ago=inside, created_ago=inside)
    keep = [queued, running, failed, held, long]
    history = {j: await pool.fetch("SELECT event_id, ts, kind, payload FROM dl_job_events WHERE job_id = $1 "
                                   "ORDER BY event_id", j) for j in keep}
    assert {r["p"] for r in await pool.fetch("SELECT DISTINCT tableoid::regclass::text AS p FROM dl_job_events "
                                             "WHERE job_id = ANY($1) AND kind = 'queued'", [gone, *keep])} == {old.name}
    seen = []

    async def hook(partition: parts.JournalPartition) -> None:
        seen.append((partition.name, partition.range_from, partition.range_to))

    policy = RetentionPolicy.from_settings(Settings(db_dsn="postgresql://x/y"))
    results = await parts.drop_due(pool, policy, datetime.now(UTC), before_drop=hook)
    # the legacy partition, which ends where the old one starts, is past the horizon too: it goes first
    assert [r.partition.name for r in results] == ["dl_job_events_p_legacy", old.name]
    assert [r.error for r in results] == [None, None]
    assert seen == [("dl_job_events_p_legacy", None, old.range_from), (old.name, old.range_from, old.range_to)]
    assert old.name not in {p.name for p in await parts.list_partitions(pool)}
    for job in keep:
        after = await pool.fetch("SELECT event_id, ts, kind, payload FROM dl_job_events WHERE job_id = $1 "
                                 "ORDER BY event_id", job)
        assert after == history[job], job
    assert results[1].kept == sum(1 for j in keep for r in history[j] if old.range_from <= r["ts"] < old.range_to)
    assert await exists(pool, gone) == (True, 0)
    # the pruner then deletes it; its cascade has nothing left to delete
    report = await prune(pool, policy)
    assert report.jobs[("q", "succeeded")] == 1
    assert await exists(pool, gone) == (False, 0)
    for job in keep:
        assert (await exists(pool, job))[0]


async def test_a_retry_racing_the_drop_waits_for_it(fresh_pool):
    """An expired failed job (past a 7-day age) with rows in the dropped partition is locked by the
    drop: a retry in another session waits until the drop commits, so the job was past its age
    when its old rows went, in every order."""
    pool = fresh_pool
    old = await _age_partition(pool, 8)
    assert old.range_to is not None
    inside = (datetime.now(UTC) - old.range_to).total_seconds() + 3600
    job = await add_job(pool, status="failed", finished_ago=inside, picked_ago=inside + 5)
    policy = RetentionPolicy.uniform(7 * DAY)
    params = parts.policy_parameters(policy, None)
    from dataloader.storage.queries import sql

    async with pool.acquire() as conn, conn.transaction():
        statuses, ages, queues, queue_statuses, queue_ages, floor = params
        locked = await conn.fetchval(sql("retention/journal_lock_expired"), statuses, ages, queues, queue_statuses,
                                     queue_ages, floor, old.name, old.range_from, old.range_to)
        assert locked == 1
        other = await pool.acquire()
        try:
            await other.execute("SET lock_timeout = '200ms'")
            with pytest.raises(asyncpg.LockNotAvailableError):
                await other.execute("SELECT 1 FROM dl_jobs WHERE job_id = $1 FOR UPDATE", job)
        finally:
            await other.execute("RESET lock_timeout")
            await pool.release(other)


def test_choose_interval_and_names():
    assert parts.choose_interval(7 * DAY) == parts.DAY
    assert parts.choose_interval(4 * DAY) == parts.DAY
    assert parts.choose_interval(3 * DAY) == parts.HOUR
    assert parts.choose_interval(None) == parts.DAY
    assert parts.choose_interval(3 * DAY, "day") == parts.DAY
    with pytest.raises(ValueError):
        parts.choose_interval(DAY, "week")
    start = datetime(2026, 12, 2, tzinfo=UTC)
    assert parts.partition_name(start, parts.DAY) == "dl_job_events_p20261202"
    assert parts.partition_name(start + timedelta(hours=13), parts.HOUR) == "dl_job_events_p20261202_1300"


def test_plan_ahead_continues_the_last_range_or_skips_a_gap():
    now = datetime(2026, 12, 2, 10, 30, tzinfo=UTC)
    legacy = parts.JournalPartition("dl_job_events_p_legacy", None, datetime(2026, 12, 3, tzinfo=UTC))
    planned = parts.partitions_ahead([legacy], now, parts.DAY, 3)
    assert [(s.day, e.day) for _, s, e in planned] == [(3, 4), (4, 5), (5, 6)]
    # the duty was away: the last range ended in the past; the next range starts after now
    stale = parts.JournalPartition("p", datetime(2026, 11, 20, tzinfo=UTC), datetime(2026, 11, 21, tzinfo=UTC))
    planned = parts.partitions_ahead([stale], now, parts.DAY, 2)
    assert [s.day for _, s, _ in planned] == [3, 4]
    due = parts.due_partitions([legacy, stale], now, 7 * DAY)
    assert [p.name for p in due] == ["p"]
    assert parts.due_partitions([stale], now, None) == []


def test_the_pruner_waits_for_the_drop_at_most_an_interval_and_an_hour():
    now = datetime(2026, 12, 2, tzinfo=UTC)
    floor = parts.JournalFloor(7 * DAY, now - timedelta(days=8), now, parts.DAY)
    assert floor.age(7 * DAY) == 8 * DAY  # waits for the 8-day-old partition to go
    assert floor.age(30 * DAY) == 30 * DAY  # older than every partition: as configured
    assert floor.age(DAY) == DAY  # a shorter rule does not wait (its partition goes much later)
    stalled = parts.JournalFloor(7 * DAY, now - timedelta(days=20), now, parts.DAY)
    assert stalled.age(7 * DAY) == 8 * DAY + 3600  # capped: a stalled duty never stops the pruner
    legacy = parts.JournalFloor(7 * DAY, None, now, parts.DAY)
    assert legacy.age(7 * DAY) == 7 * DAY  # the rows from before 0039 go by cascade, as they did


async def test_every_face_shows_the_same_partitions(fresh_pool, fresh, cli_env):
    """Python, HTTP and CLI give the same status: the partitions created ahead by the duty's tick,
    their ranges, the horizon and the next drop; the route is in the OpenAPI document."""
    import asyncio
    import json

    import httpx

    from dataloader import App
    from dataloader.api import create_app
    from tests.support.cli import run

    settings = Settings(db_dsn=fresh, workers=[], stats_enabled=False)
    async with App(settings) as app:
        duty = parts.JournalPartitioner.from_settings(fresh_pool, settings)
        tick = await duty.tick()
        assert len(tick.created) >= 3 and tick.dropped == []
        status = await app.retention_partitions()
        assert status["partitioned"] and status["drop"] and status["interval_sec"] == DAY
        assert status["horizon_sec"] == 7 * DAY
        assert status["next_drop"]["partition"] == "dl_job_events_p_legacy"
        names = [p["name"] for p in status["partitions"]]
        assert names[0] == "dl_job_events_p_legacy" and names[-1] == "dl_job_events_default"
        assert set(tick.created) <= set(names)
        transport = httpx.ASGITransport(app=create_app(app.settings, context=app))
        async with httpx.AsyncClient(transport=transport, base_url="http://dl.test") as client:
            body = (await client.get("/api/v1/retention/partitions")).json()
            assert [p["name"] for p in body["partitions"]] == names
            assert body["partitions"][0]["from"] is None and body["partitions"][1]["from"] is not None
            assert "/api/v1/retention/partitions" in (await client.get("/openapi.json")).json()["paths"]
    result = await asyncio.to_thread(run, ["retention", "partitions"], {**cli_env, "DL_DB_DSN": fresh})
    assert result.returncode == 0, result.stderr
    assert [p["name"] for p in json.loads(result.stdout)["partitions"]] == names


async def test_deleting_a_job_cascades_to_its_rows_in_every_partition(fresh_pool):
    pool = fresh_pool
    await parts.create_ahead(pool, datetime.now(UTC), parts.DAY, 2)
    job = await add_job(pool, status="succeeded", finished_ago=400 * DAY)  # legacy
    await pool.execute("INSERT INTO dl_job_events (job_id, queue, kind, ts) VALUES ($1, 'q', 'a', now() + interval "
                       "'1 day'), ($1, 'q', 'b', 'infinity')", job)
    where = {r[0] for r in await pool.fetch("SELECT tableoid::regclass::text FROM dl_job_events WHERE job_id = $1",
                                            job)}
    assert len(where) == 3 and "dl_job_events_default" in where
    await pool.execute("DELETE FROM dl_jobs WHERE job_id = $1", job)
    assert await exists(pool, job) == (False, 0)


async def test_a_workflow_resumes_after_its_old_journal_partition_was_dropped(fresh_pool, fresh):
    """Promises 1, 4 and 13 across a drop: a run waiting for a signal has its journal in a partition
    8 days old (its rows' ts set there); the partition is dropped; its rows are kept (its job is
    queued), and the signal then ends the run without running its recorded step again."""
    import tests.workflows.flows  # noqa: F401  (registers t.wait)
    from dataloader import App
    from tests.conftest import wait_until
    from tests.workflows.conftest import PROBE_DDL, probe_counts, workflow_settings

    pool = fresh_pool
    await pool.execute(PROBE_DDL)

    async def waiting(run_id: uuid.UUID) -> bool:
        return bool(await pool.fetchval(
            "SELECT EXISTS (SELECT 1 FROM dl_workflow_steps s JOIN dl_jobs j ON j.job_id = s.run_id "
            "WHERE s.run_id = $1 AND s.kind = 'wait' AND s.state = 'pending' AND j.status = 'queued')", run_id))

    async with App(workflow_settings(fresh, journal_partitions_enabled=False)) as app:
        async with app.running():
            run_id = await app.workflows.start("t.wait", {"dsn": fresh, "timeout": 60})
            await wait_until(lambda: waiting(run_id), timeout=15, message="the run waits")
        start, _ = _old_range(8)
        await pool.execute("UPDATE dl_job_events SET ts = $2 WHERE job_id = $1", run_id, start + parts.HOUR)
        old = await _age_partition(pool, 8)
        history = await pool.fetch("SELECT event_id, ts, kind FROM dl_job_events WHERE job_id = $1 ORDER BY event_id",
                                   run_id)
        assert {r[0] for r in await pool.fetch("SELECT DISTINCT tableoid::regclass::text FROM dl_job_events "
                                               "WHERE job_id = $1", run_id)} == {old.name}
        dropped = await parts.drop_due(pool, RetentionPolicy.uniform(7 * DAY), datetime.now(UTC))
        assert old.name in [d.partition.name for d in dropped] and all(d.error is None for d in dropped)
        assert await pool.fetch("SELECT event_id, ts, kind FROM dl_job_events WHERE job_id = $1 ORDER BY event_id",
                                run_id) == history
        async with app.running():
            await app.signal_workflow(run_id, "go", {"paid": 1})
            assert await app.workflows.result(run_id, timeout=20) == {"first": {"paid": 1}, "second": None}
    assert await probe_counts(pool, run_id) == {"started": 1}


async def test_a_status_the_policy_keeps_for_ever_keeps_its_rows(fresh_pool):
    """A policy with no age for failed jobs keeps them whatever their age (RetentionPolicy.age is
    None): an ancient failed job's rows survive the drop; a succeeded one's go."""
    pool = fresh_pool
    old = await _age_partition(pool, 8)
    assert old.range_to is not None
    inside = (datetime.now(UTC) - old.range_to).total_seconds() + 3600
    failed = await add_job(pool, status="failed", finished_ago=inside, picked_ago=inside + 5)
    gone = await add_job(pool, status="succeeded", finished_ago=inside, picked_ago=inside + 5)
    dropped = await parts.drop_due(pool, RetentionPolicy({"succeeded": 7 * DAY}), datetime.now(UTC))
    assert old.name in [d.partition.name for d in dropped] and all(d.error is None for d in dropped)
    assert await exists(pool, failed) == (True, 3)
    assert await exists(pool, gone) == (True, 0)


async def test_delete_mode_drops_a_partition_past_the_horizon_once_it_is_empty(fresh_pool):
    """DL_JOURNAL_PARTITIONS_DROP=false: the cascade empties an old partition row by row, and the
    duty then drops it (an emptied range keeps its indexes' pages for ever, bench/sustained.py's
    delete run). A partition with a row stays, whatever its statistics say; one whose statistics
    still count rows is not read until vacuum has passed."""
    pool = fresh_pool
    old = await _age_partition(pool, 8)
    assert old.range_from is not None and old.range_to is not None
    inside = (datetime.now(UTC) - old.range_to).total_seconds() + 3600
    failed = await add_job(pool, status="failed", finished_ago=inside, picked_ago=inside + 10)  # kept 30 days
    rows = await exists(pool, failed)
    assert rows[1] > 0
    await pool.execute(f'ANALYZE "{old.name}"')
    policy = RetentionPolicy.from_settings(Settings(db_dsn="postgresql://x/y"))
    duty = parts.JournalPartitioner(pool, policy, parts.PartitionSettings(drop=False))

    async def names() -> set[str]:
        return {p.name for p in await parts.list_partitions(pool)}

    tick = await duty.tick()
    # the legacy partition (empty in a fresh database, never analyzed) is past the horizon too: it goes
    assert [d.partition.name for d in tick.dropped] == ["dl_job_events_p_legacy"]
    assert old.name in await names() and await exists(pool, failed) == rows
    await pool.execute("DELETE FROM dl_jobs WHERE job_id = $1", failed)  # the pruner's cascade
    assert (await duty.tick()).dropped == [] and old.name in await names()  # its statistics still count rows
    await pool.execute(f'VACUUM "{old.name}"')
    # statistics that say empty while a row is there: the look finds it, the partition stays
    other = await add_job(pool, status="failed", finished_ago=inside, picked_ago=inside + 10)
    assert (await exists(pool, other))[1] > 0
    assert (await duty.tick()).dropped == [] and old.name in await names()
    await pool.execute("DELETE FROM dl_jobs WHERE job_id = $1", other)
    tick = await duty.tick()
    assert [d.partition.name for d in tick.dropped] == [old.name] and tick.dropped[0].error is None
    assert old.name not in await names()
