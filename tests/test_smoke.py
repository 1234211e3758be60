async def test_schema_is_migrated(db):
    assert await db.fetchval("SELECT count(*) FROM dl_jobs") == 0
