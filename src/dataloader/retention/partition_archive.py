"""The journal's partitions go to the archive before they are dropped (docs/patterns.md "Archival").

With DL_ARCHIVE_URL set, the partition duty (retention/partitions.py) drops a partition only after
its rows are in the archive: `before_drop` streams them into one file, `journal/<partition name>`,
whose lines are `{"job_id", "ts", "event"}` (the form `Archive.history` reads back beside the
pruner's job batches). An export that fails raises, and the duty leaves that partition for its next
tick, so nothing is dropped that was not exported. Exporting the same partition again (a drop that
did not commit after its export) rewrites the same file: the name is the partition's.

Rows a kept job still needs are also moved into the DEFAULT partition by the drop, and exported
again later with their job's batch; the read-back keeps one row per event id."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import asyncpg

from dataloader.retention.archive import Archive, RawJson
from dataloader.retention.partitions import BeforeDrop, JournalPartition
from dataloader.storage import retention_repository


def export_before_drop(pool: asyncpg.Pool, archive: Archive) -> BeforeDrop:
    """The `before_drop` hook that writes a partition's rows to `archive`."""

    async def export(partition: JournalPartition) -> None:
        if partition.range_to is None:  # the DEFAULT partition is never dropped
            return

        async def rows() -> AsyncIterator[dict[str, Any]]:
            async for row in retention_repository.journal_partition_rows(pool, partition.name, partition.range_from,
                                                                       partition.range_to):
                yield {"job_id": row["job_id"], "ts": row["ts"], "event": RawJson(row["row_json"])}

        await archive.archive(f"journal/{partition.name}", rows())

    return export
