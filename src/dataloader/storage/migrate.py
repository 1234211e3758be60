"""Schema migrations: Alembic under an advisory lock, with adoption of a hand-applied 003 schema.

Several replicas starting together serialize on MIGRATION_LOCK_ID; the first one migrates, the
others find the schema current. A database where the 003 DDL was applied by hand (no
alembic_version table, but dl_jobs present with the spec's columns) is stamped at the first
revision instead of failing on CREATE TABLE. Its statements are in `queries/` like every other
(`schema_tables.sql`, `dl_jobs_columns.sql`, `migration_lock.sql`, `migration_unlock.sql`).

Alembic and SQLAlchemy (~30 MB of a worker's memory) are imported only to migrate: the head
revision is read from the migration files' `revision`/`down_revision` lines, and `upgrade` first
asks the database with one asyncpg query whether it is already at head, which is what every
start of a worker finds.
"""

from __future__ import annotations

import ast
import functools
import logging
from pathlib import Path
from typing import TYPE_CHECKING

import asyncpg

from dataloader.exceptions import SchemaMismatch
from dataloader.storage.db import asyncpg_dsn, create_engine
from dataloader.storage.queries import sql

if TYPE_CHECKING:
    from alembic.config import Config
    from sqlalchemy.engine import Connection

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


VERSIONS_DIR = Path(__file__).parent / "migrations" / "versions"


def alembic_config() -> Config:
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(Path(__file__).parent / "migrations"))
    return cfg


@functools.cache
def head_revision() -> str:
    """The revision no other migration builds on (what Alembic calls the head), read from the
    module-level `revision = "..."` and `down_revision = ...` assignments of the migration files."""
    revisions: dict[str, str | None] = {}
    for path in sorted(VERSIONS_DIR.glob("*.py")):
        found = _revision_assignments(path)
        if "revision" in found:
            revisions[found["revision"]] = found.get("down_revision")  # type: ignore[assignment]
    heads = set(revisions) - set(revisions.values())
    if len(heads) != 1:
        raise RuntimeError(f"the migrations in {VERSIONS_DIR} must have one head, found {sorted(heads)}")
    return heads.pop()


def _revision_assignments(path: Path) -> dict[str, str | None]:
    found: dict[str, str | None] = {}
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.AnnAssign):
            target, value = node.target, node.value
        elif isinstance(node, ast.Assign) and len(node.targets) == 1:
            target, value = node.targets[0], node.value
        else:
            continue
        if isinstance(target, ast.Name) and target.id in ("revision", "down_revision") \
                and isinstance(value, ast.Constant):
            found[target.id] = value.value
    return found


async def database_revision(dsn: str) -> str | None:
    """The revision the database is at, or None when it was never migrated."""
    conn = await asyncpg.connect(asyncpg_dsn(dsn))
    try:
        return await conn.fetchval(sql("schema_revision"))
    except asyncpg.exceptions.UndefinedTableError:
        return None
    finally:
        await conn.close()


def _current_revision(conn: Connection) -> str | None:
    from alembic.runtime.migration import MigrationContext

    return MigrationContext.configure(conn).get_current_revision()


def _adopt_hand_applied_schema(conn: Connection) -> bool:
    """Stamp a database whose dl_jobs was created by hand from the 003 DDL. Returns True if stamped."""
    from alembic import command
    from sqlalchemy import text

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
    from alembic import command
    from sqlalchemy import text

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
    current = await database_revision(dsn)
    if current == head_revision():
        return current, current
    engine = create_engine(dsn)
    try:
        async with engine.connect() as conn:
            before, after = await conn.run_sync(_upgrade_locked)
    finally:
        await engine.dispose()
    if before != after:
        log.info("database schema migrated", extra={"from_revision": before, "to_revision": after})
    return before, after
