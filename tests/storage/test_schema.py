import asyncio
import importlib

import asyncpg
import pytest

import dataloader
from dataloader.storage import migrate
from tests.conftest import wait_until
from tests.support.database import create_database, drop_database

spec = importlib.import_module("dataloader.storage.migrations.versions.0001_spec_schema")


@pytest.fixture
async def empty_db(pg_server):
    url = await create_database(pg_server)
    yield url
    await drop_database(pg_server, url)


async def test_fresh_database_gets_the_spec_schema_and_engine_indexes(empty_db):
    before, after = await migrate.upgrade(empty_db)
    assert before is None
    assert after == migrate.head_revision()
    conn = await asyncpg.connect(empty_db)
    try:
        indexes = {r["indexname"] for r in await conn.fetch("SELECT indexname FROM pg_indexes")}
        assert {"ix_dl_jobs_claim", "ix_dl_jobs_running_lease", "ix_dl_jobs_status_queue",
                "ix_dl_jobs_key_live", "ix_dl_jobs_claim_order"} <= indexes
        # one index by lock_key (0046): every job takes an entry in each index of its status
        assert "ix_dl_jobs_lock_key_active" not in indexes
        dl_jobs_indexes = await conn.fetchval("SELECT count(*) FROM pg_indexes WHERE tablename = 'dl_jobs'")
        assert dl_jobs_indexes == 15, await conn.fetch("SELECT indexdef FROM pg_indexes WHERE tablename = 'dl_jobs'")
        triggers = {r["tgname"] for r in await conn.fetch("SELECT tgname FROM pg_trigger WHERE NOT tgisinternal")}
        # those of workflows (0030), chain joins (0032) and step jobs (0036) let every other row pass on their WHEN
        assert triggers == {"dl_jobs_notify_ins", "dl_jobs_notify_upd", "dl_workflow_child_end", "dl_workflow_requeue",
                            "dl_chain_join_member_end", "dl_chain_join_member_deleted",
                            "dl_workflow_step_job_end", "dl_workflow_step_job_deleted"}
        enum = await conn.fetchval("SELECT enum_range(NULL::dl_status)::text")
        assert enum == "{queued,running,succeeded,failed,canceled,lost}"
    finally:
        await conn.close()
    # a second run is a no-op
    assert await migrate.upgrade(empty_db) == (after, after)


async def test_hand_applied_spec_ddl_is_adopted_not_recreated(empty_db):
    conn = await asyncpg.connect(empty_db)
    try:
        for statement in spec.spec_statements():
            await conn.execute(statement)
        await conn.execute("INSERT INTO dl_jobs (job_id, queue, task, lock_key) "
                           "VALUES (gen_random_uuid(), 'q', 'dl.noop', 'k')")
    finally:
        await conn.close()
    before, after = await migrate.upgrade(empty_db)
    assert (before, after) == (migrate.SPEC_REVISION, migrate.head_revision())
    conn = await asyncpg.connect(empty_db)
    try:
        assert await conn.fetchval("SELECT count(*) FROM dl_jobs") == 1  # data kept
        assert await conn.fetchval("SELECT version_num FROM alembic_version") == migrate.head_revision()
    finally:
        await conn.close()


async def test_a_foreign_dl_jobs_table_is_refused_untouched(empty_db):
    conn = await asyncpg.connect(empty_db)
    try:
        await conn.execute("CREATE TABLE dl_jobs (id int)")
    finally:
        await conn.close()
    with pytest.raises(migrate.SchemaMismatch, match="does not match the 003 schema"):
        await migrate.upgrade(empty_db)
    conn = await asyncpg.connect(empty_db)
    try:
        cols = await conn.fetch("SELECT column_name FROM information_schema.columns WHERE table_name='dl_jobs'")
        assert [c["column_name"] for c in cols] == ["id"]
    finally:
        await conn.close()


async def test_except_dataloader_schema_mismatch_catches_the_refusal(empty_db):
    """The class `dataloader` exports is the one raised, whether the schema is brought up by
    `migrate.upgrade` or through the App (there is one SchemaMismatch, in dataloader.exceptions)."""
    conn = await asyncpg.connect(empty_db)
    try:
        await conn.execute("CREATE TABLE dl_jobs (id int)")
    finally:
        await conn.close()
    app = dataloader.App(dataloader.Settings(db_dsn=empty_db, workers=[]))
    for attempt in (migrate.upgrade(empty_db), app.open(migrate_schema=True)):
        try:
            await attempt
        except dataloader.SchemaMismatch as exc:
            assert type(exc) is dataloader.SchemaMismatch and exc.code == "schema_mismatch"
        else:
            await app.close()
            pytest.fail("a foreign dl_jobs table was not refused")


async def test_replicas_migrating_at_once_do_not_race(empty_db):
    results = await asyncio.gather(*(migrate.upgrade(empty_db) for _ in range(4)))
    assert {after for _, after in results} == {migrate.head_revision()}
    assert sum(1 for before, _ in results if before is None) == 1


def test_revision_ids_fit_alembic_version_column():
    from alembic.script import ScriptDirectory

    script = ScriptDirectory.from_config(migrate.alembic_config())
    ids = [rev.revision for rev in script.walk_revisions()]
    assert ids and all(len(rev) <= 32 for rev in ids), ids  # alembic_version.version_num is varchar(32)


WORKFLOW_LIST_INDEXES = {"ix_dl_workflow_runs_created", "ix_dl_workflow_runs_workflow"}


def _to_revision(conn, revision: str) -> None:
    from alembic import command

    cfg = migrate.alembic_config()
    cfg.attributes["connection"] = conn
    current = migrate._current_revision(conn)
    (command.upgrade if revision == "head" else command.downgrade)(cfg, revision)
    conn.commit()
    assert current != migrate._current_revision(conn)


async def test_the_workflow_listing_migration_goes_down_and_up_again(empty_db):
    """0031 (the listing's indexes) is reversible: down to 0030 drops exactly its indexes, and up
    again puts them back, at head."""
    from dataloader.storage.db import create_engine

    await migrate.upgrade(empty_db)

    async def indexes() -> set[str]:
        conn = await asyncpg.connect(empty_db)
        try:
            return {r["indexname"] for r in await conn.fetch(
                "SELECT indexname FROM pg_indexes WHERE tablename = 'dl_workflow_runs'")}
        finally:
            await conn.close()

    at_head = await indexes()
    assert WORKFLOW_LIST_INDEXES <= at_head
    engine = create_engine(empty_db)
    try:
        async with engine.connect() as conn:
            await conn.run_sync(_to_revision, "0030_workflows")
            assert await indexes() == at_head - WORKFLOW_LIST_INDEXES
            await conn.run_sync(_to_revision, "head")
    finally:
        await engine.dispose()
    assert await indexes() == at_head
    assert await migrate.database_revision(empty_db) == migrate.head_revision()


async def test_the_step_jobs_migration_goes_down_and_up_again(empty_db):
    """0036 (step jobs) is reversible: down to 0035 drops the steps' job_id, its index and the two
    triggers that count a step job's end; up again puts them back, at head."""
    from dataloader.storage.db import create_engine

    await migrate.upgrade(empty_db)

    async def parts() -> tuple[set[str], set[str]]:
        conn = await asyncpg.connect(empty_db)
        try:
            columns = {r["column_name"] for r in await conn.fetch(
                "SELECT column_name FROM information_schema.columns WHERE table_name = 'dl_workflow_steps'")}
            triggers = {r["tgname"] for r in await conn.fetch(
                "SELECT tgname FROM pg_trigger WHERE tgrelid = 'dl_jobs'::regclass AND NOT tgisinternal")}
            return columns, triggers
        finally:
            await conn.close()

    columns, triggers = await parts()
    added = {"dl_workflow_step_job_end", "dl_workflow_step_job_deleted"}
    assert "job_id" in columns and added <= triggers
    engine = create_engine(empty_db)
    try:
        async with engine.connect() as conn:
            await conn.run_sync(_to_revision, "0035_workflow_tokens")
            assert await parts() == (columns - {"job_id"}, triggers - added)
            await conn.run_sync(_to_revision, "head")
    finally:
        await engine.dispose()
    assert await parts() == (columns, triggers)
    assert await migrate.database_revision(empty_db) == migrate.head_revision()


async def test_the_workflow_generations_migration_goes_down_and_up_again(empty_db):
    """0037 (restart generations, the run-end notification) is reversible: down to 0036 drops its
    two columns and gives the join's trigger function back its 0030 body; up again restores both."""
    from dataloader.storage.db import create_engine

    await migrate.upgrade(empty_db)

    async def shape() -> tuple[set[str], bool]:
        conn = await asyncpg.connect(empty_db)
        try:
            columns = {r["column_name"] for r in await conn.fetch(
                "SELECT column_name FROM information_schema.columns WHERE table_name = 'dl_workflow_runs'")}
            body = await conn.fetchval("SELECT prosrc FROM pg_proc WHERE proname = 'dl_workflow_child_end'")
            return columns, "dl_workflow_end" in body
        finally:
            await conn.close()

    columns, notifies = await shape()
    assert {"generation", "parent_generation"} <= columns and notifies
    engine = create_engine(empty_db)
    try:
        async with engine.connect() as conn:
            await conn.run_sync(_to_revision, "0036_workflow_step_jobs")
            down_columns, down_notifies = await shape()
            assert down_columns == columns - {"generation", "parent_generation"} and not down_notifies
            await conn.run_sync(_to_revision, "head")
    finally:
        await engine.dispose()
    assert await shape() == (columns, True)
    assert await migrate.database_revision(empty_db) == migrate.head_revision()


async def test_bulk_insert_notifies_each_queue_once(dsn, db):
    conn = await asyncpg.connect(dsn)
    got: list[str] = []
    await conn.add_listener("dl_jobs", lambda *args: got.append(args[3]))
    try:
        await db.execute(
            "INSERT INTO dl_jobs (job_id, queue, task, lock_key) SELECT gen_random_uuid(), "
            "CASE WHEN g % 2 = 0 THEN 'a' ELSE 'b' END, 'dl.noop', g::text FROM generate_series(1, 500) g")
        await conn.execute("SELECT 1")  # notifications arrive before the reply to a later statement
        await wait_until(lambda: len(got) >= 2, timeout=5)
        await conn.execute("SELECT 1")  # a third notification would have arrived by now
        assert sorted(got) == ["a", "b"]
    finally:
        await conn.close()


# The 003 §4 DDL of the two contract tables, copied verbatim from the specification
# (../shared/seeds/003_0dcbe80d1f2805a6.txt, section 4), not from our migrations, so a migration
# that drifts from it cannot agree with itself. Promise 7: columns, types, nullability, defaults and
# constraints stay; a migration may only add.
SPEC_003_DDL = """
CREATE TYPE dl_status AS ENUM ('queued','running','succeeded','failed','canceled','lost');

CREATE TABLE dl_jobs (
  job_id uuid PRIMARY KEY,
  queue text NOT NULL,
  task text NOT NULL,
  args jsonb NOT NULL DEFAULT '{}'::jsonb,
  idempotency_key text UNIQUE,
  lock_key text NOT NULL,
  partition_key text NOT NULL DEFAULT '',
  priority int NOT NULL DEFAULT 100,
  available_at timestamptz NOT NULL DEFAULT now(),
  status dl_status NOT NULL DEFAULT 'queued',
  attempt int NOT NULL DEFAULT 0,
  max_attempts int NOT NULL DEFAULT 5,
  lease_ttl_sec int NOT NULL DEFAULT 60,
  lease_expires_at timestamptz,
  heartbeat_at timestamptz,
  cancel_requested boolean NOT NULL DEFAULT false,
  progress jsonb NOT NULL DEFAULT '{}'::jsonb,
  error text,
  producer text,
  consumer_group text,
  created_at timestamptz NOT NULL DEFAULT now(),
  started_at timestamptz,
  finished_at timestamptz,
  CONSTRAINT dl_jobs_chk_positive CHECK (priority >= 0 AND attempt >= 0 AND max_attempts >= 0 AND lease_ttl_sec > 0)
);

CREATE INDEX ix_dl_jobs_claim ON dl_jobs(queue, available_at, priority, created_at)
WHERE status = 'queued';

CREATE INDEX ix_dl_jobs_running_lease ON dl_jobs(lease_expires_at)
WHERE status = 'running';

CREATE INDEX ix_dl_jobs_status_queue ON dl_jobs(status, queue);

CREATE TABLE dl_job_events (
  event_id bigserial PRIMARY KEY,
  job_id uuid NOT NULL REFERENCES dl_jobs(job_id) ON DELETE CASCADE,
  queue text NOT NULL,
  ts timestamptz NOT NULL DEFAULT now(),
  kind text NOT NULL,
  payload jsonb
);
"""
SPEC_SCHEMA = "dl_spec_003"

COLUMNS = """
SELECT c.relname AS table, a.attname AS column, t.typname AS type, a.atttypmod AS typmod,
       a.attnotnull AS not_null, pg_get_expr(d.adbin, d.adrelid) AS default
FROM pg_attribute a
JOIN pg_class c ON c.oid = a.attrelid
JOIN pg_namespace n ON n.oid = c.relnamespace
JOIN pg_type t ON t.oid = a.atttypid
LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
WHERE n.nspname = $1 AND c.relname IN ('dl_jobs', 'dl_job_events') AND a.attnum > 0 AND NOT a.attisdropped
"""
CONSTRAINTS = """
SELECT c.relname AS table, k.contype::text AS kind, pg_get_constraintdef(k.oid) AS definition
FROM pg_constraint k JOIN pg_class c ON c.oid = k.conrelid JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = $1 AND c.relname IN ('dl_jobs', 'dl_job_events')
  AND k.contype <> 'n'  -- PostgreSQL 18's NOT NULL rows; nullability is compared with the columns
"""
INDEXES = """
SELECT c.relname AS index, pg_get_indexdef(c.oid) AS definition
FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = $1 AND c.relname LIKE 'ix_dl_jobs_%'
"""


def _unqualified(value: object) -> object:
    return value.replace(f"{SPEC_SCHEMA}.", "").replace("public.", "") if isinstance(value, str) else value


async def _catalog(conn: asyncpg.Connection, query: str, schema: str) -> set[tuple]:
    return {tuple(_unqualified(v) for v in r.values()) for r in await conn.fetch(query, schema)}


async def test_the_latest_migration_keeps_every_column_and_constraint_of_the_003_ddl(empty_db):
    """Promise 7: migrate a fresh database to head, then apply the spec's DDL verbatim in a schema of
    its own and compare the catalogs: every spec column exists at head with the same type, typmod,
    nullability and default; every spec constraint (primary keys, the idempotency_key UNIQUE, the
    CHECK, the journal's ON DELETE CASCADE foreign key) and index is there with the same definition.
    Columns, constraints and indexes a later migration added are allowed."""
    await migrate.upgrade(empty_db)
    conn = await asyncpg.connect(empty_db)
    try:
        await conn.execute(f"CREATE SCHEMA {SPEC_SCHEMA}")
        await conn.execute(f"SET search_path = {SPEC_SCHEMA}")
        await conn.execute(SPEC_003_DDL)
        await conn.execute("RESET search_path")
        spec_columns = await _catalog(conn, COLUMNS, SPEC_SCHEMA)
        head_columns = await _catalog(conn, COLUMNS, "public")
        assert len(spec_columns) == 23 + 6  # the DDL above was read whole
        assert spec_columns - head_columns == set(), sorted(
            (col, [h for h in head_columns if h[:2] == col[:2]]) for col in spec_columns - head_columns)
        spec_constraints = await _catalog(conn, CONSTRAINTS, SPEC_SCHEMA)
        assert {kind for _, kind, _ in spec_constraints} == {"p", "u", "c", "f"}
        # the one change (0039, the journal partitioned by ts): its primary key holds the partition key
        assert spec_constraints - await _catalog(conn, CONSTRAINTS, "public") == {
            ("dl_job_events", "p", "PRIMARY KEY (event_id)")}
        assert ("dl_job_events", "p", "PRIMARY KEY (ts, event_id)") in await _catalog(conn, CONSTRAINTS, "public")
        spec_indexes = await _catalog(conn, INDEXES, SPEC_SCHEMA)
        assert len(spec_indexes) == 3
        assert spec_indexes - await _catalog(conn, INDEXES, "public") == set()
        enum = await conn.fetchval("SELECT enum_range(NULL::public.dl_status)::text")
        assert enum == await conn.fetchval(f"SELECT enum_range(NULL::{SPEC_SCHEMA}.dl_status)::text")
    finally:
        await conn.close()


def _move_to(conn, revision: str, down: bool) -> None:
    from alembic import command

    cfg = migrate.alembic_config()
    cfg.attributes["connection"] = conn
    (command.downgrade if down else command.upgrade)(cfg, revision)
    conn.commit()


async def test_the_workflow_operations_migration_goes_down_and_up_again(empty_db):
    """0038 (bulk operations over workflow runs) is reversible: down to 0037 drops the `failed`
    count and the workflow kinds (their operations with them), up again allows them, at head."""
    from dataloader.storage.db import create_engine

    await migrate.upgrade(empty_db)

    async def state() -> tuple[bool, bool]:
        conn = await asyncpg.connect(empty_db)
        try:
            has_failed = await conn.fetchval("SELECT count(*) FROM information_schema.columns WHERE table_name = "
                                             "'dl_operations' AND column_name = 'failed'") == 1
            try:
                async with conn.transaction():
                    await conn.execute(
                        "INSERT INTO dl_operations (operation_id, kind, filter, params, total, batch_size, started_by, "
                        "snapshot_at) VALUES (gen_random_uuid(), 'workflow_cancel', '{}', '{}', 0, 1, 't', now())")
                    raise RuntimeError("roll back")
            except asyncpg.CheckViolationError:
                allowed = False
            except RuntimeError:
                allowed = True
            return has_failed, allowed
        finally:
            await conn.close()

    assert await state() == (True, True)
    engine = create_engine(empty_db)
    try:
        async with engine.connect() as conn:
            await conn.run_sync(_move_to, "0037_workflow_generations", True)
            assert await state() == (False, False)
            await conn.run_sync(_move_to, "head", False)
    finally:
        await engine.dispose()
    assert await state() == (True, True)
    assert await migrate.database_revision(empty_db) == migrate.head_revision()
