"""A PostgreSQL for the test run: DL_TEST_DSN when set, the embedded server otherwise, and a fresh
database per run so runs never see each other's rows."""

from __future__ import annotations

import os
import tempfile
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import asyncpg


@dataclass
class TestServer:
    admin_dsn: str
    embedded: Any = None  # an EmbeddedPostgres
    data_dir: Path | None = None

    @property
    def is_embedded(self) -> bool:
        return self.embedded is not None


def with_database(dsn: str, database: str) -> str:
    parts = urlsplit(dsn)
    return urlunsplit((parts.scheme, parts.netloc, f"/{database}", parts.query, parts.fragment))


def start_server() -> TestServer:
    admin = os.environ.get("DL_TEST_DSN")
    if admin:
        return TestServer(admin_dsn=admin)
    from dataloader.storage.embedded import EmbeddedPostgres

    base = Path(tempfile.mkdtemp(prefix="dl-test-pg-"))
    base.chmod(0o755)  # as root the server runs as DL_EMBEDDED_USER, who must enter it
    data_dir = base / "pgdata"
    server = EmbeddedPostgres(data_dir, remove_on_stop=True)
    return TestServer(admin_dsn=server.start(), embedded=server, data_dir=data_dir)


async def create_database(server: TestServer) -> str:
    name = f"dl_test_{uuid.uuid4().hex[:12]}"
    conn = await asyncpg.connect(server.admin_dsn)
    try:
        await conn.execute(f'CREATE DATABASE "{name}"')
    finally:
        await conn.close()
    return with_database(server.admin_dsn, name)


async def drop_database(server: TestServer, dsn: str) -> None:
    name = urlsplit(dsn).path.lstrip("/")
    conn = await asyncpg.connect(server.admin_dsn)
    try:
        await conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    finally:
        await conn.close()


class RestartNotReal(AssertionError):
    """A test asked for a PostgreSQL restart where only terminating sessions is possible, and the run
    requires real restarts (under CI)."""


def real_restart_required() -> str | None:
    """Why a restart that only terminates sessions is not acceptable in this run (None: it is, with
    a warning): under CI (the env variable CI set, as .ci/run and every CI service set it), or when
    DL_TEST_REQUIRE_RESTART=1 asks for it locally."""
    if os.environ.get("CI"):
        return "CI is set"
    if os.environ.get("DL_TEST_REQUIRE_RESTART") == "1":
        return "DL_TEST_REQUIRE_RESTART=1"
    return None


async def restart_server(server: TestServer, dsn: str) -> str:
    """Restart PostgreSQL under the running test; returns what happened, for the test to report.

    - embedded server: a real restart (`pg_ctl restart -m fast`) -> "restarted";
    - external DL_TEST_DSN server with DL_TEST_RESTART_CMD set: that shell command is run (e.g.
      `pg_ctlcluster --skip-systemctl-redirect 15 main restart`) -> "restarted";
    - external server without it: it is not ours to restart, so every session of the test database
      is terminated instead (what clients see of a restart, minus the downtime) -> "terminated";
      except under CI (env CI set) or with DL_TEST_REQUIRE_RESTART=1, where a restart that is not
      real fails the test (RestartNotReal) before anything is done: a test named for a restart must
      not pass in CI on a restart that lost no shared state and had no downtime.
    """
    import asyncio

    if server.embedded is not None:
        await asyncio.to_thread(server.embedded.restart)  # type: ignore[attr-defined]
        return "restarted"
    command = os.environ.get("DL_TEST_RESTART_CMD")
    if command:
        import subprocess

        from tests.support.tiers import require_exclusive

        require_exclusive("restarts the PostgreSQL server that every xdist worker shares")

        done = await asyncio.to_thread(subprocess.run, command, shell=True, capture_output=True, text=True,
                                       timeout=120)
        if done.returncode != 0:
            raise RuntimeError(f"DL_TEST_RESTART_CMD {command!r} exited with {done.returncode}:\n"
                               f"{done.stdout}{done.stderr}")
        return "restarted"
    why = real_restart_required()
    if why:
        raise RestartNotReal(f"PostgreSQL would NOT be restarted ({why}): the tests use the external server "
                             "of DL_TEST_DSN, and without DL_TEST_RESTART_CMD its sessions could only be "
                             "terminated; set DL_TEST_RESTART_CMD (e.g. `pg_ctlcluster --skip-systemctl-redirect "
                             "15 main restart`) or leave DL_TEST_DSN unset (the embedded server restarts for real)")
    name = urlsplit(dsn).path.lstrip("/")
    conn = await asyncpg.connect(server.admin_dsn)
    try:
        await conn.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                           "WHERE datname = $1 AND pid <> pg_backend_pid()", name)
    finally:
        await conn.close()
    return "terminated"


async def reset_tables(pool: asyncpg.Pool, statement: str, wait_sec: float = 20.0) -> None:
    """Run `statement` (a TRUNCATE giving the test a fresh start). A statement an earlier test left
    running (pytest-timeout ends a test, not its query) would hold its locks and make every later
    test of this worker wait out its own timeout: after `wait_sec`, the sessions holding locks in
    this database are terminated, with a warning naming their queries, and `statement` runs again."""
    import warnings

    async with pool.acquire() as conn:
        try:
            async with conn.transaction():
                await conn.execute(f"SET LOCAL lock_timeout = '{int(wait_sec * 1000)}ms'")
                await conn.execute(statement)
            return
        except asyncpg.LockNotAvailableError:
            pass
        stuck = await conn.fetch(
            "SELECT pid, state, left(query, 200) AS query FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid() AND pid IN "
            "(SELECT pid FROM pg_locks WHERE granted AND locktype = 'relation' "
            " AND database = (SELECT oid FROM pg_database WHERE datname = current_database()))")
        for row in stuck:
            await conn.execute("SELECT pg_terminate_backend($1)", row["pid"])
        warnings.warn(f"{statement.split()[0]} waited {wait_sec}s on sessions an earlier test left behind; "
                      f"terminated: {[(r['state'], r['query']) for r in stuck]}", stacklevel=2)
        await conn.execute(statement)
