"""The statements of key rotation and key status (docs/security.md "Encryption at rest"): every
stored payload column, walked by its primary key in batches and rewritten by compare-and-set, and
the count of envelopes per column and key. The re-encryption itself (Python: the keys live in the
process) is encryption/keys.py's; the statements are queries/encryption/*.sql, two per column.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import asyncpg

from dataloader.storage.queries import sql
from dataloader.storage.search_repository import begin_count

_ZERO = "00000000-0000-0000-0000-000000000000"


@dataclass(frozen=True, slots=True)
class Payload:
    """One stored payload column: its name (`table.column`), the key before its first row, its
    batch scan (connection, after key, current kid, rows) and its compare-and-set rewrite
    (connection, keys, texts read, new envelopes)."""

    name: str
    start: list[Any]
    scan: Callable[..., Any]
    rewrite: Callable[..., Any]


PAYLOADS: tuple[Payload, ...] = (
    Payload("dl_jobs.args", [_ZERO],
            lambda c, after, kid, n: c.fetch(sql("encryption/scan_jobs_args"), after, kid, n),
            lambda c, keys, old, new: c.fetchval(sql("encryption/rewrite_jobs_args"), keys, old, new)),
    Payload("dl_jobs.progress", [_ZERO],
            lambda c, after, kid, n: c.fetch(sql("encryption/scan_jobs_progress"), after, kid, n),
            lambda c, keys, old, new: c.fetchval(sql("encryption/rewrite_jobs_progress"), keys, old, new)),
    Payload("dl_jobs.result", [_ZERO],
            lambda c, after, kid, n: c.fetch(sql("encryption/scan_jobs_result"), after, kid, n),
            lambda c, keys, old, new: c.fetchval(sql("encryption/rewrite_jobs_result"), keys, old, new)),
    Payload("dl_process_tasks.args", [_ZERO],
            lambda c, after, kid, n: c.fetch(sql("encryption/scan_process_task_args"), after, kid, n),
            lambda c, keys, old, new: c.fetchval(sql("encryption/rewrite_process_task_args"), keys, old, new)),
    Payload("dl_process_tasks.response", [_ZERO],
            lambda c, after, kid, n: c.fetch(sql("encryption/scan_process_task_response"), after, kid, n),
            lambda c, keys, old, new: c.fetchval(sql("encryption/rewrite_process_task_response"), keys, old, new)),
    Payload("dl_processes.aux_state", ['', ''],
            lambda c, after, kid, n: c.fetch(sql("encryption/scan_process_aux"), after, kid, n),
            lambda c, keys, old, new: c.fetchval(sql("encryption/rewrite_process_aux"), keys, old, new)),
    Payload("dl_process_events.payload", ['', '', -1],
            lambda c, after, kid, n: c.fetch(sql("encryption/scan_process_events"), after, kid, n),
            lambda c, keys, old, new: c.fetchval(sql("encryption/rewrite_process_events"), keys, old, new)),
    Payload("dl_process_feed.payload", [-1],
            lambda c, after, kid, n: c.fetch(sql("encryption/scan_process_feed"), after, kid, n),
            lambda c, keys, old, new: c.fetchval(sql("encryption/rewrite_process_feed"), keys, old, new)),
    Payload("dl_workflow_steps.result", [_ZERO, -1],
            lambda c, after, kid, n: c.fetch(sql("encryption/scan_workflow_steps"), after, kid, n),
            lambda c, keys, old, new: c.fetchval(sql("encryption/rewrite_workflow_steps"), keys, old, new)),
    Payload("dl_workflow_signals.payload", [-1],
            lambda c, after, kid, n: c.fetch(sql("encryption/scan_workflow_signals"), after, kid, n),
            lambda c, keys, old, new: c.fetchval(sql("encryption/rewrite_workflow_signals"), keys, old, new)),
)


class EncryptionRepository:
    def __init__(self, pool: asyncpg.Pool, *, count_timeout_sec: float | None = None) -> None:
        self.pool = pool
        self.count_timeout_sec = count_timeout_sec

    async def scan(self, payload: Payload, after: list[Any], kid: str, limit: int) -> list[asyncpg.Record]:
        """The next `limit` rows of the column after key `after`: (k, v), v the envelope text when
        it is under a key other than `kid`, else NULL."""
        return await payload.scan(self.pool, after, kid, limit)

    async def rewrite(self, payload: Payload, keys: list[Any], old: list[str], new: list[str]) -> int:
        """Store the new envelopes where the column still holds the text read; how many did."""
        return int(await payload.rewrite(self.pool, keys, old, new))

    async def envelopes_by_key(self) -> list[asyncpg.Record]:
        """(payload, kid, n) for every stored column and key; reads the payload tables whole, under
        the operator's count settings (custom plans, the count timeout)."""
        async with self.pool.acquire() as conn, conn.transaction(readonly=True):
            await begin_count(conn, self.count_timeout_sec)
            return await conn.fetch(sql("encryption/envelopes_by_key"))
