"""SQL of the console's sessions (`queries/console/*.sql`, table of migration 0028): open one at
sign-in (rotating the browser's previous one out), check one per console request, close one at
sign-out. The console (ui/auth.py) decides what a session is; this only stores it."""

from __future__ import annotations

from datetime import datetime

import asyncpg

from dataloader.storage.queries import sql


class ConsoleSessionRepository:
    def __init__(self, pool: asyncpg.Pool) -> None:
        self.pool = pool

    async def open(self, session_hash: bytes, token_mac: str, ttl_sec: float, *,
                   previous: bytes | None = None, client: str | None = None) -> datetime:
        """A new session; returns when it expires."""
        row = await self.pool.fetchrow(sql("console/open_session"), session_hash, token_mac, float(ttl_sec),
                                       previous, client)
        return row["expires_at"]

    async def alive(self, session_hash: bytes, token_mac: str) -> datetime | None:
        """When the session expires, or None: unknown, signed out, of another token, or expired."""
        return await self.pool.fetchval(sql("console/session_alive"), session_hash, token_mac)

    async def close(self, session_hash: bytes) -> None:
        await self.pool.execute(sql("console/close_session"), session_hash)
