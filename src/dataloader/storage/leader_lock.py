"""Statements of the maintenance leader's own session (maintenance/leader.py): the session
advisory lock that makes a node the leader, the probe that it still holds it, and the server-side
idle timeout of that session. Statements in `queries/maintenance/`."""

from __future__ import annotations

import asyncpg

from dataloader.storage.queries import sql


async def try_lock(conn: asyncpg.Connection, lock_class: int, lock_id: int) -> bool:
    """Take the leader lock on `conn`'s session if it is free; whether this session holds it."""
    return await conn.fetchval(sql("maintenance/leader_try_lock"), lock_class, lock_id)


async def check(conn: asyncpg.Connection, lock_class: int, lock_id: int) -> bool:
    """Whether `conn`'s session is alive and still holds the leader lock (one round trip)."""
    return await conn.fetchval(sql("maintenance/leader_check"), lock_class, lock_id)


async def set_session_timeout(conn: asyncpg.Connection, timeout: str) -> None:
    """Have the server end `conn`'s session when it stays idle longer than `timeout` (e.g. "30000ms")."""
    await conn.fetchval(sql("maintenance/leader_session_timeout"), timeout)
