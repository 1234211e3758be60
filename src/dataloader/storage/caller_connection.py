"""Statements on a connection the caller owns, inside the caller's transaction.

This is what makes a Postgres queue worth choosing: `app.enqueue(..., conn=conn)` inserts the job
in the same transaction as the caller's business rows, so the job exists if and only if they
commit. The caller may hold an asyncpg connection, or a SQLAlchemy `AsyncConnection` /
`AsyncSession` over asyncpg. SQLAlchemy starts its transaction lazily, at the first statement it
runs itself, so its connections are driven through `exec_driver_sql` (never the raw driver
connection, which could still be outside the transaction). Values come back as the connection
decodes them; callers normalise JSON columns with `json_value`.
"""

from __future__ import annotations

import json
from typing import Any

import asyncpg


async def fetch(conn: Any, query: str, *args: Any) -> list[dict[str, Any]]:
    """Run `query` ($n placeholders) on the caller's connection; rows as dicts."""
    if isinstance(conn, asyncpg.Connection | asyncpg.pool.PoolConnectionProxy):
        return [dict(row) for row in await conn.fetch(query, *args)]
    from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession

    if isinstance(conn, AsyncSession):
        conn = await conn.connection()
    if isinstance(conn, AsyncConnection):
        result = await conn.exec_driver_sql(query, args)
        return [dict(row._mapping) for row in result] if result.returns_rows else []
    raise TypeError(
        "conn must be an asyncpg connection or a SQLAlchemy AsyncConnection/AsyncSession, "
        f"got {type(conn).__name__}")


def json_value(value: Any) -> Any:
    """A jsonb column as a Python value, whether the connection decoded it or left it as text."""
    return json.loads(value) if isinstance(value, str) else value
