"""`app.audit`: the search every face of the audit trail shares (Python, HTTP `GET /api/v1/audit`,
`dataloader audit list`, the console's /ui/audit), over one validated `AuditFilter`.

With shards, each shard's database holds the rows of the changes made in it (a row commits with
its change), so a search reads every shard and merges newest first; rows are ordered by (ts, id)
and ids are UUID v7, unique across shards, so the keyset cursor holds across them too."""

from __future__ import annotations

import heapq
from collections.abc import Mapping, Sequence
from typing import Any

import asyncpg

from dataloader.exceptions import Forbidden
from dataloader.model.audit import AuditEntry, AuditFilter, AuditPage, encode_cursor
from dataloader.model.principal import Action, allows, current_principal
from dataloader.storage import audit_repository


class AuditTrail:
    def __init__(self, pools: Sequence[asyncpg.Pool]) -> None:
        self.pools = list(pools)

    async def search(self, filter: AuditFilter | Mapping[str, Any] | None = None, **fields: Any) -> AuditPage:
        """Rows newest first, `limit` at a time (default 100, at most 500); pass the page's
        `next_cursor` as `cursor` for the next one. Keywords: actor, action, target, outcome,
        since, until, limit, cursor (model/audit.py `AuditFilter`)."""
        principal = current_principal()
        if not allows(principal, Action.READ_AUDIT):  # here, so every face refuses alike
            raise Forbidden(f"{principal.label} may not read the audit trail (needs {Action.READ_AUDIT.value})")
        f = AuditFilter.of(filter, **fields)
        # one row more than asked says whether another page exists, without a count
        found: list[list[AuditEntry]] = [await audit_repository.search(pool, f, f.limit + 1) for pool in self.pools]
        rows = found[0] if len(found) == 1 else list(
            heapq.merge(*found, key=lambda e: (e.ts, e.id), reverse=True))
        if len(rows) <= f.limit:
            return AuditPage(rows, None)
        last = rows[f.limit - 1]
        return AuditPage(rows[:f.limit], encode_cursor(last.ts, last.id))
