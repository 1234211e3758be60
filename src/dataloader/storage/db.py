"""Connections: the asyncpg pool the engine runs on and the SQLAlchemy async engine (Alembic, and
the spec's engine/sessionmaker for code that prefers the ORM layer)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import asyncpg
from sqlalchemy.ext.asyncio import AsyncEngine, async_sessionmaker, create_async_engine

# Errors that mean "the database is not reachable right now" rather than "this statement is wrong".
CONNECTION_ERRORS: tuple[type[BaseException], ...] = (
    OSError,
    ConnectionError,
    asyncpg.exceptions.ConnectionDoesNotExistError,
    asyncpg.exceptions.InterfaceError,
    asyncpg.exceptions.CannotConnectNowError,
    asyncpg.exceptions.AdminShutdownError,
    asyncpg.exceptions.CrashShutdownError,
    asyncpg.exceptions.ConnectionFailureError,
    asyncpg.exceptions.TooManyConnectionsError,
    asyncpg.exceptions.PostgresConnectionError,
)


def is_connection_error(exc: BaseException) -> bool:
    return isinstance(exc, CONNECTION_ERRORS)


def asyncpg_dsn(dsn: str) -> str:
    """Accept both `postgresql://` and SQLAlchemy-style `postgresql+asyncpg://` DSNs."""
    parts = urlsplit(dsn)
    scheme = parts.scheme.split("+", 1)[0]
    if scheme not in ("postgresql", "postgres"):
        raise ValueError(f"DSN scheme must be postgresql://, got {parts.scheme!r}")
    return urlunsplit(("postgresql", *parts[1:]))


def redact_dsn(dsn: str) -> str:
    """The DSN without its password, for logs."""
    parts = urlsplit(dsn)
    if parts.password:
        netloc = parts.netloc.replace(f":{parts.password}@", ":***@")
        return urlunsplit((parts.scheme, netloc, *parts[2:]))
    return dsn


async def init_connection(conn: asyncpg.Connection) -> None:
    """jsonb and json columns arrive as Python objects and are sent from them."""
    for type_name in ("jsonb", "json"):
        await conn.set_type_codec(type_name, encoder=json.dumps, decoder=json.loads, schema="pg_catalog")


async def connect(dsn: str, **kwargs: Any) -> asyncpg.Connection:
    conn = await asyncpg.connect(asyncpg_dsn(dsn), **kwargs)
    await init_connection(conn)
    return conn


async def _keep_session(conn: asyncpg.Connection) -> None:
    """Pool release without asyncpg's reset query (one more round trip per release). Nothing in
    dataloader leaves session state on a pooled connection: no LISTEN (the listener has its own
    connection), no SET, and a connection that may still hold an advisory lock is terminated,
    never released. An open transaction is still rolled back by the pool."""


async def create_pool(dsn: str, *, min_size: int = 1, max_size: int = 10, **kwargs: Any) -> asyncpg.Pool:
    return await asyncpg.create_pool(
        asyncpg_dsn(dsn),
        min_size=min_size,
        max_size=max_size,
        init=init_connection,
        reset=_keep_session,
        # A connection idle for a while is closed so a stopped service holds few sessions.
        max_inactive_connection_lifetime=60.0,
        **kwargs,
    )


def create_engine(dsn: str) -> AsyncEngine:
    """SQLAlchemy async engine over asyncpg; connections come from asyncpg.connect so every DSN form
    asyncpg understands (unix sockets via ?host=) works unchanged."""
    raw = asyncpg_dsn(dsn)
    creator: Callable[[], Any] = lambda: asyncpg.connect(raw)  # noqa: E731
    return create_async_engine("postgresql+asyncpg://", async_creator=creator, pool_pre_ping=True)


def create_sessionmaker(engine: AsyncEngine) -> async_sessionmaker:
    return async_sessionmaker(engine, expire_on_commit=False)
