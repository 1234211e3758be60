import asyncio
import importlib

import asyncpg
import pytest

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
                "ix_dl_jobs_lock_key_active", "ix_dl_jobs_claim_order"} <= indexes
        triggers = {r["tgname"] for r in await conn.fetch("SELECT tgname FROM pg_trigger WHERE NOT tgisinternal")}
        assert triggers == {"dl_jobs_notify_ins", "dl_jobs_notify_upd"}
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


async def test_replicas_migrating_at_once_do_not_race(empty_db):
    results = await asyncio.gather(*(migrate.upgrade(empty_db) for _ in range(4)))
    assert {after for _, after in results} == {migrate.head_revision()}
    assert sum(1 for before, _ in results if before is None) == 1


def test_revision_ids_fit_alembic_version_column():
    from alembic.script import ScriptDirectory

    script = ScriptDirectory.from_config(migrate.alembic_config())
    ids = [rev.revision for rev in script.walk_revisions()]
    assert ids and all(len(rev) <= 32 for rev in ids), ids  # alembic_version.version_num is varchar(32)


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
