"""The Python API works against the embedded server with no DSN (issue 34): an App that started the
embedded server itself (App.embedded(), SyncApp.embedded()) migrates it on open, so a fresh data
directory works at once; a DSN copied from the service's log that leads to an embedded server's
directory with no schema says to use DL_DATA_DIR, and a plain DSN names the command to run."""

from __future__ import annotations

import asyncio

import pytest

from dataloader import App, JobStatus, SchemaNotReady, Settings, SyncApp
from dataloader.storage.embedded import EmbeddedPostgres
from tests.support.database import create_database, drop_database

pytestmark = pytest.mark.process  # starts embedded servers


async def test_an_embedded_app_migrates_its_own_server_and_a_copied_dsn_is_told_about_data_dir(server_dir):
    data_dir = (server_dir / "pgdata").resolve()
    holder = EmbeddedPostgres(data_dir)
    dsn = await asyncio.to_thread(holder.start)  # a fresh server, no schema: as a newcomer finds it
    try:
        with pytest.raises(SchemaNotReady) as refused:
            await App(Settings(db_dsn=dsn)).open()
        assert f"`DL_DATA_DIR={data_dir} dataloader db upgrade` with DL_DB_DSN unset" in str(refused.value)
        assert f'App.embedded(data_dir="{data_dir}")' in str(refused.value)

        async with App.embedded(Settings(db_dsn=None), data_dir=data_dir) as app:
            assert (await app.enqueue("dl.noop")).status is JobStatus.queued
    finally:
        await asyncio.to_thread(holder.stop)

    def sync_on_a_fresh_directory() -> JobStatus:
        with SyncApp.embedded(Settings(db_dsn=None), data_dir=server_dir / "sync-pgdata") as app:
            return app.enqueue("dl.noop").status

    assert await asyncio.to_thread(sync_on_a_fresh_directory) is JobStatus.queued


async def test_a_database_with_no_schema_names_the_command_and_the_dsn_variable(pg_server):
    fresh = await create_database(pg_server)
    try:
        with pytest.raises(SchemaNotReady, match=r"run `dataloader db upgrade` with DL_DB_DSN set to this database"):
            await App(Settings(db_dsn=fresh)).open()
    finally:
        await drop_database(pg_server, fresh)
