"""Statements on a connection the caller owns, inside the caller's transaction.

This is what makes a Postgres queue worth choosing: `app.enqueue(..., conn=conn)` inserts the job
in the same transaction as the caller's business rows, so the job exists if and only if they
commit. The caller may hold an asyncpg connection, or a SQLAlchemy `AsyncConnection` /
`AsyncSession` over asyncpg. SQLAlchemy starts its transaction lazily, at the first statement it
runs itself, so its connections are driven through `exec_driver_sql` (never the raw driver
connection, which could still be outside the transaction). Values come back as the connection
decodes them; callers normalise JSON columns with `json_value`.

A sync program's connection (`SyncApp.enqueue(..., conn=)`) comes wrapped in a `SyncConnection`:
`fetch` runs the statement on it at once, without awaiting anything, so the very coroutines of
the async path (JobManager, JobRepository) complete in one step on the caller's thread
(`run_at_once`). It only translates placeholders: the statements are the files of queries/.
"""

from __future__ import annotations

import json
from collections.abc import Coroutine, Iterator, Sequence
from typing import Any, TypeVar

import asyncpg

T = TypeVar("T")


async def fetch(conn: Any, query: str, *args: Any) -> list[dict[str, Any]]:
    """Run `query` ($n placeholders) on the caller's connection; rows as dicts."""
    if isinstance(conn, SyncConnection):
        return conn.fetch(query, args)
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


def run_at_once(coro: Coroutine[Any, Any, T]) -> T:
    """The result of a coroutine that never waits (its statements run on a `SyncConnection`), run
    on this thread without an event loop."""
    try:
        coro.send(None)
    except StopIteration as done:
        return done.value
    coro.close()
    raise RuntimeError("a statement on a caller's sync connection waited for the event loop")


class SyncConnection:
    """A caller's SYNC connection (a psycopg 3 connection or a SQLAlchemy sync Connection/Session),
    for `SyncApp.enqueue(..., conn=)`: `fetch` runs a `$n` statement on it, on the calling thread,
    inside the caller's transaction (SQLAlchemy: through the connection the Session's transaction
    uses, never a raw driver connection that could be outside it)."""

    def __init__(self, conn: Any) -> None:
        self.conn = conn
        self.kind = _kind_of(conn)

    def fetch(self, query: str, params: Sequence[Any]) -> list[dict[str, Any]]:
        if self.kind == "psycopg":
            from psycopg.rows import dict_row

            with self.conn.cursor(row_factory=dict_row) as cur:
                cur.execute(_convert(query, "pyformat"), _params("pyformat", query, params))
                return [dict(row) for row in cur.fetchall()] if cur.description else []
        conn = self.conn.connection() if self.kind == "sqlalchemy_session" else self.conn
        style = conn.dialect.paramstyle
        result = conn.exec_driver_sql(_convert(query, style), _params(style, query, params))
        return [dict(row) for row in result.mappings()] if result.returns_rows else []


def _kind_of(conn: Any) -> str:
    try:
        import psycopg
    except ImportError:  # the `sync` extra is not installed: only SQLAlchemy connections can be given
        psycopg = None  # type: ignore[assignment]
    if psycopg is not None and isinstance(conn, psycopg.Connection):
        return "psycopg"
    try:
        from sqlalchemy.engine import Connection
        from sqlalchemy.orm import Session
    except ImportError:  # pragma: no cover - sqlalchemy is a dependency
        Connection = Session = ()  # type: ignore[assignment,misc]
    if isinstance(conn, Session):
        return "sqlalchemy_session"
    if isinstance(conn, Connection):
        return "sqlalchemy"
    raise TypeError(
        "conn must be a psycopg 3 Connection or a SQLAlchemy sync Connection/Session, got "
        f"{type(conn).__module__}.{type(conn).__name__} (an asyncpg or SQLAlchemy async connection goes "
        "to the async App.enqueue)")


def _scan(query: str) -> Iterator[tuple[str, str]]:
    """The statement as ("text" | "param", piece) tokens, with `--` comments dropped; `$n` inside
    quotes or comments is not a parameter."""
    i, n, start = 0, len(query), 0
    while i < n:
        ch = query[i]
        if ch == "'" or ch == '"':
            end = query.find(ch, i + 1)
            while end != -1 and end + 1 < n and query[end + 1] == ch:  # doubled quote inside
                end = query.find(ch, end + 2)
            i = n if end == -1 else end + 1
        elif query.startswith("--", i):
            yield "text", query[start:i]
            end = query.find("\n", i)
            i = start = n if end == -1 else end
        elif ch == "$" and i + 1 < n and query[i + 1].isdigit() and (i == 0 or not _ident(query[i - 1])):
            yield "text", query[start:i]
            j = i + 1
            while j < n and query[j].isdigit():
                j += 1
            yield "param", query[i + 1:j]
            i = start = j
        else:
            i += 1
    yield "text", query[start:]


def _ident(ch: str) -> bool:
    return ch.isalnum() or ch == "_"


def _convert(query: str, paramstyle: str) -> str:
    """`$n` → the driver's placeholder. `pyformat`: %(pn)s, `format`: %s (in order of appearance),
    `named`: :pn; `%` is doubled where the driver reads it."""
    if paramstyle not in ("pyformat", "format", "named"):
        raise TypeError(f"the connection's driver uses the {paramstyle!r} paramstyle; "
                        "pyformat, format and named are supported")
    out: list[str] = []
    for kind, piece in _scan(query):
        if kind == "param":
            out.append({"pyformat": f"%(p{piece})s", "format": "%s", "named": f":p{piece}"}[paramstyle])
        else:
            out.append(piece.replace("%", "%%") if paramstyle != "named" else piece)
    return "".join(out)


def _params(paramstyle: str, query: str, params: Sequence[Any]) -> Any:
    if paramstyle == "format":
        return tuple(params[int(piece) - 1] for kind, piece in _scan(query) if kind == "param")
    return {f"p{i}": value for i, value in enumerate(params, start=1)}
