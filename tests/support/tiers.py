"""The suite's tiers: markers that say what a test costs, assigned at collection, and an audit of the
ones that started a process without being in a tier that says so.

A test gets exactly one tier marker, the most expensive that applies:

- ``unit``: needs no database (no ``dsn``/``pg_server`` fixture, directly or through ``pool``, ``db``...);
- ``db``: uses the test database (``dsn``, ``pool``, ``db``, ``pg_server``...);
- ``process``: starts processes (the ``workers``, ``subprocess_env``, ``python`` or ``restart`` fixture, or marked);
- ``chaos``: the chaos runs: tests in tests/chaos that start processes.

Orthogonal to the tiers, ``slow`` marks the tests that take many seconds of CPU although they start no
process (schema fuzzing, million-row plans); the fast tier leaves them out:
``pytest -m "(unit or db) and not slow"``. The markers and their descriptions are registered in
pyproject.toml.

A tier marker written on a test (or a module's ``pytestmark``) can only raise its tier, never lower it.
The audit: every test that starts a process (``subprocess.Popen``, which asyncio's subprocesses use
too) while tiered ``unit`` or ``db`` FAILS (an error at its teardown naming the fix), and is listed
again at the end of the run: a tier that lies would put a process-starting test in the fast tier.

The ``exclusive`` marker: a test that disturbs the whole PostgreSQL server (restarts it) or needs a quiet
machine runs with no other test running on any xdist worker. ``exclusive(when="shared_server")`` is
exclusive only when the workers share one server (DL_TEST_DSN); with the embedded server, each worker
has its own, so restarting it disturbs no one else. A test that takes the ``restart`` fixture without
an ``exclusive`` marker fails at its setup (`not_exclusive_enough`), whatever server the run uses, so
the mark is never found missing only on a shared server.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

TIERS = ("unit", "db", "process", "chaos")
DB_FIXTURES = frozenset({"dsn", "pg_server"})
PROCESS_FIXTURES = frozenset({"workers", "subprocess_env", "python", "restart"})  # restart: pg_ctl
CHAOS_DIR = Path(__file__).resolve().parent.parent / "chaos"
SPAWNED = "spawned_process"
TIER_KEY = pytest.StashKey[str]()


def tier_of(item: pytest.Item) -> str:
    names = set(getattr(item, "fixturenames", ()))
    auto = "unit"
    if names & DB_FIXTURES:
        auto = "db"
    if names & PROCESS_FIXTURES:
        auto = "process"
    if auto == "process" and CHAOS_DIR in Path(str(item.path)).resolve().parents:
        auto = "chaos"
    marked = [m.name for m in item.iter_markers() if m.name in TIERS]
    return max([auto, *marked], key=TIERS.index)


def assign(items: list[pytest.Item]) -> None:
    for item in items:
        tier = tier_of(item)
        item.stash[TIER_KEY] = tier
        if not item.get_closest_marker(tier):
            item.add_marker(tier)


# --- the audit of started processes -------------------------------------------------------------------

class _Audit:
    def __init__(self) -> None:
        self.current: pytest.Item | None = None  # the test running in this process
        self.suspended = 0
        self.spawned: set[str] = set()  # node ids of the tests that started a process


_audit = _Audit()


def install_audit() -> None:
    original = subprocess.Popen._execute_child  # type: ignore[attr-defined]

    def execute_child(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        item = _audit.current
        if item is not None and not _audit.suspended:
            _audit.spawned.add(item.nodeid)
        return original(self, *args, **kwargs)

    subprocess.Popen._execute_child = execute_child  # type: ignore[attr-defined]


@contextmanager
def audit_suspended() -> Iterator[None]:
    """Processes the test infrastructure starts (the embedded server) are no test's."""
    _audit.suspended += 1
    try:
        yield
    finally:
        _audit.suspended -= 1


def audit_start(item: pytest.Item) -> None:
    _audit.current = item


def audit_finish(item: pytest.Item, report: pytest.TestReport) -> None:
    """At a test's teardown: a test that started a process while tiered unit or db fails there."""
    if report.when == "teardown":
        _audit.current = None
        tier = item.stash.get(TIER_KEY, "unit")
        if item.nodeid in _audit.spawned and tier in ("unit", "db"):
            report.user_properties.append((SPAWNED, True))
            report.outcome = "failed"
            report.longrepr = (f"{item.nodeid} started a process but is tiered `{tier}`: mark it "
                               "@pytest.mark.process (tests/support/tiers.py)")


def spawned_outside_its_tier(report: pytest.TestReport) -> bool:
    return report.when == "teardown" and (SPAWNED, True) in report.user_properties


# --- exclusive tests across xdist workers ---------------------------------------------------------------

# Fixtures that disturb the whole server: a test that takes one must be marked exclusive.
EXCLUSIVE_FIXTURES = frozenset({"restart"})


def not_exclusive_enough(item: pytest.Item) -> str | None:
    """Why `item` may not run as it is marked (None: it may)."""
    needs = sorted(set(getattr(item, "fixturenames", ())) & EXCLUSIVE_FIXTURES)
    if needs and item.get_closest_marker("exclusive") is None:
        return (f"{item.nodeid} takes the {', '.join(needs)} fixture (it restarts PostgreSQL) without an "
                "exclusive marker: mark it @pytest.mark.exclusive(when=\"shared_server\") (tests/support/tiers.py)")
    return None


LOCK_DIR = "DL_TEST_LOCK_DIR"


def make_lock_dir(config: pytest.Config) -> None:
    """In the xdist controller: a directory for the workers' locks, handed to them in the environment
    (they are started after this)."""
    if hasattr(config, "workerinput") or not getattr(config.option, "numprocesses", None):
        return
    os.environ[LOCK_DIR] = tempfile.mkdtemp(prefix="dl-test-locks-")
    config.stash[_LOCK_DIR_KEY] = os.environ[LOCK_DIR]


def drop_lock_dir(config: pytest.Config) -> None:
    path = config.stash.get(_LOCK_DIR_KEY, None)
    if path is not None:
        shutil.rmtree(path, ignore_errors=True)
        os.environ.pop(LOCK_DIR, None)


_LOCK_DIR_KEY = pytest.StashKey[str]()


def _lock_dir(config: pytest.Config) -> Path | None:
    """The directory shared by the run's xdist workers (None when not under xdist)."""
    if not hasattr(config, "workerinput"):
        return None
    path = os.environ.get(LOCK_DIR)
    return Path(path) if path else None


def is_exclusive(item: pytest.Item, shared_server: bool) -> bool:
    marker = item.get_closest_marker("exclusive")
    if marker is None:
        return False
    return marker.kwargs.get("when") != "shared_server" or shared_server


@contextmanager
def exclusion(config: pytest.Config, exclusive: bool) -> Iterator[None]:
    """A readers-writer lock over the run's workers: every test holds it shared, an exclusive one
    holds it alone. The gate keeps an exclusive test from waiting forever behind the others: a test
    takes the gate before the lock, and an exclusive test keeps it until it holds the lock alone."""
    directory = _lock_dir(config)
    if directory is None:
        yield
        return
    with open(directory / "gate", "a+") as gate, open(directory / "server", "a+") as lock:
        fcntl.flock(gate, fcntl.LOCK_EX)
        try:
            fcntl.flock(lock, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
        finally:
            fcntl.flock(gate, fcntl.LOCK_UN)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def require_exclusive(what: str) -> None:
    """Refuse to do `what` (something that disturbs every worker) in a test not marked exclusive
    while other xdist workers run beside it."""
    if int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")) <= 1:
        return
    item = _audit.current
    if item is None or not is_exclusive(item, shared_server=True):
        name = item.nodeid if item is not None else "this test"
        raise RuntimeError(f"{name} {what}: mark it @pytest.mark.exclusive, or run with -n 0")
