"""A journal partition goes to the archive before it is dropped (retention/partition_archive.py):
its rows are read back by `Archive.history` after the drop, and an export that fails leaves the
partition and every row in place (the duty tries again at its next tick)."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from pathlib import Path

from dataloader import Settings
from dataloader.retention import partitions as parts
from dataloader.retention.archive import Archive
from dataloader.retention.partition_archive import export_before_drop
from dataloader.retention.policy import RetentionPolicy
from tests.retention.rows import add_job, exists
from tests.retention.test_partitions import _age_partition, fresh, fresh_pool  # noqa: F401 (fixtures)

POLICY = RetentionPolicy.from_settings(Settings(db_dsn="postgresql://x/y"))


async def _old_succeeded_job(pool) -> tuple[parts.JournalPartition, uuid.UUID]:
    old = await _age_partition(pool, 8)
    inside = (datetime.now(UTC) - old.range_to).total_seconds() + 3600  # an hour before its end
    return old, await add_job(pool, status="succeeded", finished_ago=inside, picked_ago=inside + 10)


async def test_a_dropped_partitions_rows_are_read_back_from_the_archive(fresh_pool):  # noqa: F811
    pool = fresh_pool
    old, gone = await _old_succeeded_job(pool)
    kinds = [r["kind"] for r in await pool.fetch(
        "SELECT kind FROM dl_job_events WHERE job_id = $1 ORDER BY event_id", gone)]
    assert kinds == ["queued", "picked", "succeeded"]
    archive = Archive(f"memory://dl-partition-archive-{uuid.uuid4().hex}")
    results = await parts.drop_due(pool, POLICY, datetime.now(UTC), before_drop=export_before_drop(pool, archive))
    assert [r.error for r in results] == [None] * len(results) and old.name in [r.partition.name for r in results]
    assert await exists(pool, gone) == (True, 0)  # the rows went with the partition...
    back = await Archive(archive.url).history(gone)  # ...and a fresh reader finds them in the archive
    assert [e.kind for e in back.events] == kinds
    assert f"data/journal/{old.name}.jsonl.gz" in back.files


async def test_an_export_that_fails_drops_nothing(fresh_pool, tmp_path: Path):  # noqa: F811
    pool = fresh_pool
    old, job = await _old_succeeded_job(pool)
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("a file where the archive's directories would go")
    archive = Archive(f"file://{blocker}")
    results = await parts.drop_due(pool, POLICY, datetime.now(UTC), before_drop=export_before_drop(pool, archive))
    assert results and all(r.error for r in results), results
    assert old.name in {p.name for p in await parts.list_partitions(pool)}
    assert await exists(pool, job) == (True, 3)
