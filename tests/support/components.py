"""Components a topology test needs from the machine (pgbouncer, PostgreSQL's server binaries,
Patroni and etcd):
found, or the test skips with the reason, except under CI (env CI set), where a missing component
fails the test: .ci/run installs them, so missing there means the run proves nothing."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

PGBOUNCER_CANDIDATES = ("/usr/sbin/pgbouncer", "/usr/bin/pgbouncer")
PG_BIN_CANDIDATES = ("/usr/lib/postgresql/18/bin", "/usr/lib/postgresql/17/bin", "/usr/lib/postgresql/16/bin",
                     "/usr/lib/postgresql/15/bin")


def missing(what: str) -> None:
    """Skip (locally) or fail (CI) because `what` is not installed."""
    message = f"{what} is not installed (.ci/run installs it)"
    if os.environ.get("CI"):
        pytest.fail(f"CI: {message}")
    pytest.skip(message)


def pgbouncer() -> str:
    found = shutil.which("pgbouncer") or next((p for p in PGBOUNCER_CANDIDATES if Path(p).exists()), None)
    if found is None:
        missing("pgbouncer")
    return found  # type: ignore[return-value]


def pg_bin() -> Path:
    """A directory with initdb, pg_ctl, pg_basebackup and postgres (Debian's postgresql-NN)."""
    for candidate in PG_BIN_CANDIDATES:
        path = Path(candidate)
        if all((path / tool).exists() for tool in ("initdb", "pg_ctl", "pg_basebackup", "postgres")):
            return path
    missing("PostgreSQL server binaries (postgresql-15 or newer: initdb, pg_ctl, pg_basebackup)")
    raise AssertionError  # unreachable


def patroni() -> str:
    """Debian's `patroni` (3.0 or newer: the etcd v3 API)."""
    found = shutil.which("patroni")
    if found is None:
        missing("patroni")
    return found  # type: ignore[return-value]


def etcd() -> str:
    """Debian's `etcd-server` (3.4 or newer)."""
    found = shutil.which("etcd")
    if found is None:
        missing("etcd (package etcd-server)")
    return found  # type: ignore[return-value]
