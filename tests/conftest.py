from __future__ import annotations

import asyncio
import os
import shutil
import sys
import tempfile
import uuid
import warnings
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from dataloader.processes import processors
from dataloader.storage import migrate
from dataloader.storage.db import create_pool
from tests.support import bytecode, tiers
from tests.support.database import (
    TestServer,
    create_database,
    drop_database,
    reset_tables,
    restart_server,
    start_server,
)
from tests.support.engine import WorkerProcess
from tests.support.pipelines import RUNS_DDL

ROOT = Path(__file__).resolve().parent.parent

# Fixtures shared by tests of several folders (api, jobs, storage, node): `hardening_ctx` and `http`.
pytest_plugins = ["tests.support.hardening"]


# --- tiers (see tests/support/tiers.py) and xdist --------------------------------------------------------

def pytest_configure(config: pytest.Config) -> None:
    if not hasattr(config, "workerinput"):  # the controller, before it starts the xdist workers
        bytecode.write_once()
    bytecode.allow_pytest_cache()
    tiers.install_audit()
    tiers.make_lock_dir(config)


def pytest_unconfigure(config: pytest.Config) -> None:
    tiers.drop_lock_dir(config)


# The longest test files (a minute or two each, on two cores), moved to the front of the collection:
# xdist's worksteal hands the first worker the front of the list, so they run one after the other
# from the start, while the other workers share the rest; at the end of some worker's share they
# would be the run's tail, three workers done and waiting for them.
LONGEST_FIRST = ("tests/topology/test_many_nodes.py", "tests/topology/test_patroni.py",
                 "tests/chaos/test_chaos_short.py")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    tiers.assign(items)
    items.sort(key=lambda item: item.nodeid.split("::", 1)[0] not in LONGEST_FIRST)  # stable: else as collected


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None):
    shared_server = bool(os.environ.get("DL_TEST_DSN"))
    with tiers.exclusion(item.config, tiers.is_exclusive(item, shared_server)):
        tiers.audit_start(item)
        return (yield)


def pytest_runtest_setup(item: pytest.Item) -> None:
    problem = tiers.not_exclusive_enough(item)
    if problem:
        pytest.fail(problem, pytrace=False)


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if tiers.spawned_outside_its_tier(report):  # the report comes from an xdist worker or this process
        _misplaced.add(report.nodeid)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]):
    report = yield
    tiers.audit_finish(item, report)
    return report


_misplaced: set[str] = set()


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    if _misplaced:
        terminalreporter.section("tests that started a process but are not tiered `process` (failed)")
        for nodeid in sorted(_misplaced):
            terminalreporter.line(f"{nodeid}  (mark it @pytest.mark.process)")


@pytest.fixture(scope="session")
def pg_server() -> Iterator[TestServer]:
    """The run's PostgreSQL: DL_TEST_DSN's server, or an embedded one. Under pytest-xdist every worker
    is its own session, so every worker starts its own embedded server (~2 s) and its own database."""
    with tiers.audit_suspended():
        server = start_server()
    yield server
    if server.embedded is not None:
        with tiers.audit_suspended():
            server.embedded.stop()
        shutil.rmtree(server.data_dir.parent, ignore_errors=True)  # the emptied temporary directory


@pytest.fixture(scope="session")
async def dsn(pg_server: TestServer) -> AsyncIterator[str]:
    """A fresh, migrated database for this test run."""
    url = await create_database(pg_server)
    await migrate.upgrade(url)
    conn = await asyncpg.connect(url)
    await conn.execute(RUNS_DDL)
    await conn.close()
    yield url
    await drop_database(pg_server, url)


@pytest.fixture(scope="session")
async def pool(dsn: str) -> AsyncIterator[asyncpg.Pool]:
    p = await create_pool(dsn, min_size=1, max_size=30)
    yield p
    # A test whose engine quarantined a control connection (a sync pipeline's thread still holds
    # its lock_key) never gives that connection back: close() would wait for it forever.
    try:
        await asyncio.wait_for(p.close(), timeout=10)
    except TimeoutError:
        p.terminate()


@pytest.fixture
async def db(pool: asyncpg.Pool) -> AsyncIterator[asyncpg.Pool]:
    """The pool, with the queue emptied before the test."""
    await reset_tables(pool, "TRUNCATE dl_jobs, dl_job_events, test_runs RESTART IDENTITY CASCADE")
    yield pool


@pytest.fixture
def subprocess_env(dsn: str) -> dict[str, str]:
    """Environment for a `dataloader` subprocess against the test database."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DL_", "WORKERS_JSON"))}
    env.update({
        "DL_DB_DSN": dsn,
        "DL_PIPELINE_MODULES": "tests.support.pipelines",
        "DL_LOG_FORMAT": "json",
        "PYTHONPATH": os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]),
        "PYTHONUNBUFFERED": "1",
    })
    return env


@pytest.fixture
def cli_env(dsn: str) -> dict[str, str]:
    """The settings of an in-process `dataloader` command (tests.support.cli.run) against the test
    database: subprocess_env's DL_* without its process, so the test stays in the db tier."""
    return {"DL_DB_DSN": dsn, "DL_PIPELINE_MODULES": "tests.support.pipelines", "DL_LOG_FORMAT": "json"}


@pytest.fixture
def workers(subprocess_env: dict[str, str]) -> Iterator[Callable[..., WorkerProcess]]:
    """Start `python -m dataloader worker` child processes (`workers(queues={"q": 2}, **DL_settings)`);
    every one still alive is killed at the end of the test."""
    started: list[WorkerProcess] = []

    def start(**kwargs: Any) -> WorkerProcess:
        worker = WorkerProcess(subprocess_env, **kwargs).start()
        started.append(worker)
        return worker

    yield start
    for worker in started:
        worker.close()


@pytest.fixture(scope="session")
def python() -> str:
    return sys.executable


@pytest.fixture
def restart(pg_server: TestServer, dsn: str, record_property: Callable[[str, object], None]):
    """Restart PostgreSQL (see restart_server) and make visible which kind of restart this was: a
    real one, or, with an external server and no DL_TEST_RESTART_CMD, only terminated sessions."""

    async def do() -> str:
        how = await restart_server(pg_server, dsn)
        record_property("pg_restart", how)
        if how != "restarted":
            warnings.warn(f"PostgreSQL was not restarted, its sessions were {how} (external DL_TEST_DSN "
                          "server without DL_TEST_RESTART_CMD)", stacklevel=2)
        return how

    return do


@pytest.fixture
def ns() -> Iterator[str]:
    """A fresh process namespace for the test; its processor is unregistered afterwards."""
    name = f"t{uuid.uuid4().hex[:10]}"
    yield name
    processors.unregister(name)


@pytest.fixture
def server_dir() -> Iterator[Path]:
    """A directory for an embedded PostgreSQL's data, reachable by the server's own user (as root,
    it runs as DL_EMBEDDED_USER): pytest's tmp_path lies below 0700 directories (under xdist one
    more, `popen-gwN`), where initdb fails with "Permission denied". Removed afterwards."""
    path = Path(tempfile.mkdtemp(prefix="dl-test-server-"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


async def wait_until(predicate, timeout: float = 10.0, interval: float = 0.02, message: str = ""):
    """Poll `predicate` (sync or async) until truthy or the deadline; returns its value."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        value = predicate()
        if asyncio.iscoroutine(value):
            value = await value
        if value:
            return value
        if loop.time() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {message or predicate}")
        await asyncio.sleep(interval)


@pytest.fixture
def spans() -> Iterator[Any]:
    """A real OpenTelemetry SDK provider recording into an in-memory exporter (yielded), for this test
    only: the global provider can be set once per process, so it is swapped back afterwards and every
    other test runs with tracing off (docs/observability.md)."""
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    from opentelemetry.util._once import Once

    from dataloader import tracing

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    saved = trace._TRACER_PROVIDER, trace._TRACER_PROVIDER_SET_ONCE
    trace._TRACER_PROVIDER_SET_ONCE = Once()
    trace.set_tracer_provider(provider)
    assert tracing.enabled()
    try:
        yield exporter
    finally:
        provider.shutdown()
        trace._TRACER_PROVIDER, trace._TRACER_PROVIDER_SET_ONCE = saved
