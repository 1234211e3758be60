"""Schema migrations: Alembic under an advisory lock, with adoption of a hand-applied 003 schema.

Several replicas starting together serialize on MIGRATION_LOCK_ID; the first one migrates, the
others find the schema current. A database where the 003 DDL was applied by hand (no
alembic_version table, but dl_jobs present with the spec's columns) is stamped at the first
revision instead of failing on CREATE TABLE. Its statements are in `queries/` like every other
(`schema_tables.sql`, `dl_jobs_columns.sql`, `migration_lock.sql`, `migration_unlock.sql`).
"""

from __future__ import annotations

import logging
from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import text
from sqlalchemy.engine import Connection

from dataloader.storage.db import create_engine
from dataloader.storage.queries import sql

log = logging.getLogger(__name__)

MIGRATION_LOCK_ID = 0x646C6D67  # "dlmg"
SPEC_REVISION = "0001_spec_schema"
SPEC_JOB_COLUMNS = {
    "job_id": "uuid", "queue": "text", "task": "text", "args": "jsonb", "idempotency_key": "text",
    "lock_key": "text", "partition_key": "text", "priority": "integer",
    "available_at": "timestamp with time zone", "status": "USER-DEFINED", "attempt": "integer",
    "max_attempts": "integer", "lease_ttl_sec": "integer",
    "lease_expires_at": "timestamp with time zone", "heartbeat_at": "timestamp with time zone",
    "cancel_requested": "boolean", "progress": "jsonb", "error": "text", "producer": "text",
    "consumer_group": "text", "created_at": "timestamp with time zone",
    "started_at": "timestamp with time zone", "finished_at": "timestamp with time zone",
}


class SchemaMismatch(RuntimeError):
    pass


def alembic_config() -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", str(Path(__file__).parent / "migrations"))
    return cfg


def head_revision() -> str:
    head = ScriptDirectory.from_config(alembic_config()).get_current_head()
    assert head is not None
    return head


def _current_revision(conn: Connection) -> str | None:
    return MigrationContext.configure(conn).get_current_revision()


def _adopt_hand_applied_schema(conn: Connection) -> bool:
    """Stamp a database whose dl_jobs was created by hand from the 003 DDL. Returns True if stamped."""
    tables = conn.execute(text(sql("schema_tables"))).one()
    has_version_table, has_jobs, has_events = tables.has_version_table, tables.has_jobs, tables.has_events
    if has_version_table or not has_jobs:
        return False
    rows = conn.execute(text(sql("dl_jobs_columns"))).all()
    found = {name: dtype for name, dtype in rows}
    missing = sorted(set(SPEC_JOB_COLUMNS) - set(found))
    wrong = sorted(c for c, t in SPEC_JOB_COLUMNS.items() if c in found and found[c] != t)
    if missing or wrong or not has_events:
        raise SchemaMismatch(
            "dl_jobs exists but does not match the 003 schema "
            f"(missing columns: {missing or 'none'}; wrong types: {wrong or 'none'}; "
            f"dl_job_events present: {bool(has_events)}); refusing to touch it"
        )
    cfg = alembic_config()
    cfg.attributes["connection"] = conn
    command.stamp(cfg, SPEC_REVISION)
    log.warning("adopted a hand-applied 003 schema: stamped at %s", SPEC_REVISION)
    return True


def _upgrade_locked(conn: Connection) -> tuple[str | None, str]:
    conn.execute(text(sql("migration_lock")), {"lock_id": MIGRATION_LOCK_ID})
    try:
        conn.commit()
        before = _current_revision(conn)
        if before is None and _adopt_hand_applied_schema(conn):
            conn.commit()
            before = SPEC_REVISION
        cfg = alembic_config()
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, "head")
        conn.commit()
        after = _current_revision(conn)
        assert after is not None
        return before, after
    finally:
        conn.rollback()  # leave a failed transaction before unlocking
        conn.execute(text(sql("migration_unlock")), {"lock_id": MIGRATION_LOCK_ID})
        conn.commit()


async def upgrade(dsn: str) -> tuple[str | None, str]:
    """Bring the schema to head. Returns (revision before, revision after)."""
    engine = create_engine(dsn)
    try:
        async with engine.connect() as conn:
            before, after = await conn.run_sync(_upgrade_locked)
    finally:
        await engine.dispose()
    if before != after:
        log.info("database schema migrated", extra={"from_revision": before, "to_revision": after})
    return before, after
