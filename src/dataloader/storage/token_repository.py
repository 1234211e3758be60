"""SQL of API tokens (`queries/tokens/*.sql`, table of migration 0042) on the pool, returning typed
rows (`ApiToken`). The rules (names, scopes, expiry, what a look-up means) are the capability's
(tokens/manager.py); this only stores them and finds them by their hash."""

from __future__ import annotations

import uuid
from dataclasses import dataclass

import asyncpg

from dataloader.model.api_token import ApiToken
from dataloader.model.principal import Scope
from dataloader.storage.queries import sql

MAX_LISTED = 1000


@dataclass(frozen=True, slots=True)
class LiveToken:
    """What the guard needs of a token it found: who it is, what it may do, how long it is good for."""

    id: uuid.UUID
    name: str
    scopes: frozenset[Scope]
    remaining_sec: float


class ApiTokenRepository:
    def __init__(self, pool: asyncpg.Pool) -> None:
        self.pool = pool

    async def insert(self, token_id: uuid.UUID, name: str, token_hash: bytes, scopes: list[str],
                     expires_in_sec: float, created_by: str) -> ApiToken | None:
        """The new token; None when a token that is not revoked has the name."""
        row = await self.pool.fetchrow(sql("tokens/insert_token"), token_id, name, token_hash, scopes,
                                       float(expires_in_sec), created_by)
        return None if row is None else ApiToken.from_row(row)

    async def get(self, token_id: uuid.UUID) -> ApiToken | None:
        row = await self.pool.fetchrow(sql("tokens/get_token"), token_id)
        return None if row is None else ApiToken.from_row(row)

    async def get_live_by_name(self, name: str) -> ApiToken | None:
        row = await self.pool.fetchrow(sql("tokens/get_live_token_by_name"), name)
        return None if row is None else ApiToken.from_row(row)

    async def list(self, *, include_revoked: bool) -> list[ApiToken]:
        rows = await self.pool.fetch(sql("tokens/list_tokens"), include_revoked, MAX_LISTED)
        return [ApiToken.from_row(r) for r in rows]

    async def revoke(self, token_id: uuid.UUID) -> ApiToken | None:
        row = await self.pool.fetchrow(sql("tokens/revoke_token"), token_id)
        return None if row is None else ApiToken.from_row(row)

    async def authenticate(self, token_hash: bytes, last_used_precision_sec: float) -> LiveToken | None:
        """The token of `token_hash` when it is neither revoked nor expired (its last_used_at
        moved when older than `last_used_precision_sec`)."""
        row = await self.pool.fetchrow(sql("tokens/authenticate"), token_hash, float(last_used_precision_sec))
        if row is None:
            return None
        return LiveToken(row["id"], row["name"], frozenset(Scope(s) for s in row["scopes"]), row["remaining_sec"])

    async def any_live(self) -> bool:
        return bool(await self.pool.fetchval(sql("tokens/any_live_token")))
