"""A statement as long as the longest of ours is prepared once per connection and reused, not
parsed and planned again on every call (storage/db.py MAX_CACHEABLE_STATEMENT_BYTES)."""

from __future__ import annotations

from dataloader.storage.db import connect


async def test_a_statement_of_20_kib_is_prepared_once_and_reused(dsn, db):
    long_statement = "-- " + "x" * 20_000 + "\nSELECT 1 AS one"
    conn = await connect(dsn)
    try:
        for _ in range(3):
            assert await conn.fetchval(long_statement) == 1
        prepared = await conn.fetchval("SELECT count(*) FROM pg_prepared_statements WHERE statement = $1",
                                       long_statement)
        assert prepared == 1
    finally:
        await conn.close()
