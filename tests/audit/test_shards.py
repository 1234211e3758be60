"""With shards, each shard's database holds the audit rows of the changes made in it (a row commits
with its change), a job's cancel asked of every shard in turn leaves one row, on the shard that has
the job (no refusal from the shard asked first), and a search reads and merges them all."""

from __future__ import annotations

import pytest

from dataloader.app import App
from dataloader.config import Settings
from dataloader.exceptions import JobNotFound
from tests.support.database import create_database, drop_database


@pytest.mark.slow  # migrates a fresh database for the second shard: seconds of CPU
async def test_rows_live_with_their_change_and_a_search_merges_the_shards(pg_server, dsn, trail, name):
    a, b = dsn, await create_database(pg_server)
    try:
        app = await App(Settings(db_dsn=a, workers=[]), shards={"b": {"dsn": b, "queues": ["qb"]}}).open(
            migrate_schema=True)
        try:
            job = await app.enqueue("t.any", {}, queue="qb")
            await app.pause_queue(name)  # the default shard's
            await app.cancel(job.id)  # asked of the default shard first: it has no such job
            await app.pause_queue("qb")
            try:
                await app.cancel("01a23394-aa38-7bfc-9a3f-3c19ebb8e151")
            except JobNotFound:
                pass
            here = [(r["action"], r["outcome"]) for r in await app.pool.fetch("SELECT * FROM dl_audit ORDER BY ts")]
            there = await app._managers.shards["b"].db.pool.fetch("SELECT action, outcome FROM dl_audit ORDER BY ts")
            assert here == [("queue.pause", "ok")]  # a job no shard has: no row (it names nothing)
            assert [(r["action"], r["outcome"]) for r in there] == [("job.cancel", "ok"), ("queue.pause", "ok")]
            page = await app.audit.search(limit=2)
            assert page.next_cursor is not None
            rest = await app.audit.search(cursor=page.next_cursor)
            merged = [(e.action, e.target) for e in page.entries + rest.entries]
            assert merged == [("queue.pause", "queue:qb"), ("job.cancel", f"job:{job.id}"),
                              ("queue.pause", f"queue:{name}")]
        finally:
            await app.close()
    finally:
        await drop_database(pg_server, b)
