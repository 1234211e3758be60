"""SQL of the console's sessions (`queries/console/*.sql`, table of migration 0028): open one at
sign-in (rotating the browser's previous one out), check one per console request, close one at
sign-out. A session is a DL_API_TOKEN's (its `token_mac`) or a user's (migration 0041), whose role
is read from dl_users on every check. The console (ui/auth.py) decides what a session is; this
only stores it."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

import asyncpg

from dataloader.model.principal import Role
from dataloader.storage.queries import sql


@dataclass(frozen=True, slots=True)
class SessionCheck:
    """One console request's look-up: `expires_at` None when the cookie signs nobody in; `user` and
    `role` for a user's session (None for a DL_API_TOKEN one); `users_exist` whether sign-in is
    required even without a token."""

    expires_at: datetime | None
    user: str | None
    role: Role | None
    users_exist: bool


class ConsoleSessionRepository:
    def __init__(self, pool: asyncpg.Pool) -> None:
        self.pool = pool

    async def open(self, session_hash: bytes, token_mac: str | None, ttl_sec: float, *,
                   previous: bytes | None = None, client: str | None = None, user: str | None = None) -> datetime:
        """A new session (of the token whose MAC is given, or of `user`); returns when it expires."""
        row = await self.pool.fetchrow(sql("console/open_session"), session_hash, token_mac, float(ttl_sec),
                                       previous, client, user)
        return row["expires_at"]

    async def check(self, session_hash: bytes | None, token_mac: str | None) -> SessionCheck:
        """Who the session signs in now (nobody: unknown, signed out, of another token, expired, a
        disabled or deleted user's), and whether any user exists."""
        row = await self.pool.fetchrow(sql("console/session_alive"), session_hash, token_mac)
        return SessionCheck(expires_at=row["expires_at"], user=row["user_name"],
                            role=Role(row["role"]) if row["role"] is not None else None,
                            users_exist=row["users_exist"])

    async def close(self, session_hash: bytes) -> None:
        await self.pool.execute(sql("console/close_session"), session_hash)
