"""A worker's whole start on a database already at head (the common case: every restart of every
node) loads neither Alembic nor SQLAlchemy: `open(migrate_schema=True)` asks the database for its
revision with one query and finds nothing to do. Run in a fresh interpreter."""

from __future__ import annotations

from tests.unit.test_import_footprint import loaded_after

START_A_WORKER = """
import asyncio
from dataloader import App

async def main():
    app = App()
    await app.open(migrate_schema=True)
    try:
        async with app.running(["footprint"]):
            pass
    finally:
        await app.close()

asyncio.run(main())
"""


def test_a_worker_start_on_a_current_schema_loads_no_migration_tool_or_orm(subprocess_env):
    assert loaded_after(START_A_WORKER, subprocess_env) == []
