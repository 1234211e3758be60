"""The service's own commands: `serve` (HTTP API, workers and reaper in one process), `worker`
(the same without HTTP) and `db upgrade` (migrations). `serve` and `worker` are commands of the root,
registered in cli/__init__.py."""

from __future__ import annotations

import asyncio
import errno
import logging
import signal
import socket
from typing import TYPE_CHECKING, Annotated, Any

import typer

from dataloader import tracing
from dataloader.cli.common import _cli_app, _exit, _fail, _print, _run, _settings, _with_app, new_event_loop
from dataloader.config import Settings
from dataloader.exceptions import ConfigError, DataloaderError, exit_code
from dataloader.heap import freeze_startup_objects
from dataloader.logger import writes_json

if TYPE_CHECKING:
    from dataloader.app import App

log = logging.getLogger("dataloader")

db_app = typer.Typer(help="Database schema and storage.", no_args_is_help=True)


def _signal_future() -> asyncio.Future[str]:
    """Resolves with the name of the first SIGTERM/SIGINT. Installed before the workers start: a
    signal in the window between "workers started" and the wait would otherwise kill the process
    with the default action (exit -15, no graceful hand-back)."""
    loop = asyncio.get_running_loop()
    stop: asyncio.Future[str] = loop.create_future()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, lambda s=sig: stop.done() or stop.set_result(signal.Signals(s).name))
    return stop


def serve(
    host: Annotated[str | None, typer.Option(help="Bind address (env DL_HOST, default 127.0.0.1)")] = None,
    port: Annotated[int | None, typer.Option(help="Port (env DL_PORT, default 8000)")] = None,
) -> None:
    """Run the HTTP API, the workers of WORKERS_JSON and the reaper in one process."""
    settings = _settings(service=True)
    from dataloader.api.server import run_server

    # The address first: a port that is taken is one line and exit code 2 before the embedded
    # server starts or the schema migrates, not an error after both.
    listening = _listen(host or settings.host, settings.port if port is None else port,
                        "DL_HOST" if host is None else "--host", "DL_PORT" if port is None else "--port")
    # OTEL_TRACES_EXPORTER set: spans of requests and jobs
    traced = tracing.configure_from_env(one_line=writes_json(settings.log_format))
    try:
        code = run_server(settings, sock=listening)
    finally:
        if traced:
            tracing.shutdown()
    _exit(code)


def _listen(host: str, port: int, host_name: str, port_name: str) -> socket.socket:
    """A socket bound to host:port (as uvicorn binds one: SO_REUSEADDR, IPv6 for a host with a
    colon), handed to uvicorn so nothing can take the port between the check and the serving.
    A port in use or an address this machine does not have is a ConfigError naming the option."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family=family)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        if isinstance(exc, socket.gaierror) or exc.errno == errno.EADDRNOTAVAIL:
            raise ConfigError(host_name, f"{host!r} is not an address of this machine ({exc.strerror})") from None
        if exc.errno == errno.EADDRINUSE:
            raise ConfigError(port_name, f"{host}:{port} is in use by another process") from None
        raise ConfigError(port_name, f"cannot listen on {host}:{port} ({exc.strerror})") from None
    return sock  # not inheritable: a pipeline's child process must not keep the port after serve exits


def worker(
    reaper: Annotated[bool, typer.Option("--reaper/--no-reaper", help="Also run the reaper")] = True,
) -> None:
    """Run the workers of WORKERS_JSON (and the reaper) without HTTP, until SIGTERM/SIGINT."""
    settings = _settings(service=True)
    # OTEL_TRACES_EXPORTER set: spans of the jobs it runs
    traced = tracing.configure_from_env(one_line=writes_json(settings.log_format))
    try:
        code = run_until_stopped(_run_worker(settings, reaper))
    finally:
        if traced:
            tracing.shutdown()
    _exit(code)


def run_until_stopped(main: Any) -> int:
    """asyncio.run without its final wait for the default thread pool: a sync pipeline still
    running in a thread after the shutdown timeout would block exit forever, and its job was
    already handed back to the queue."""
    loop = new_event_loop()
    asyncio.set_event_loop(loop)
    try:
        return loop.run_until_complete(main)
    finally:
        loop.run_until_complete(loop.shutdown_asyncgens())


async def _run_worker(settings: Settings, run_reaper: bool) -> int:
    app = _cli_app(settings)
    # Before open: a SIGTERM while the (embedded) database starts is then a graceful stop right
    # after the start, not the default action that leaves the server without its owner.
    stop = _signal_future()
    try:
        await app.open(migrate_schema=True)
    except DataloaderError as exc:  # one line, the exit code of docs/errors.md (as `serve`)
        log.error("start-up failed: %s: %s", exc.code, exc, extra={"error": exc.code})
        return exit_code(exc)
    except Exception as exc:
        log.error("start-up failed: %s", exc)
        return 1
    try:
        async with app.running(reaper=run_reaper):
            freeze_startup_objects()
            sig = await stop
            log.info("received %s, shutting down", sig)
    finally:
        await app.close()
    return 0


@db_app.command("upgrade")
def db_upgrade() -> None:
    """Apply migrations (adopting a schema created by hand from the 003 DDL)."""
    settings = _settings()

    async def run() -> tuple[str | None, str]:
        app = _cli_app(settings)
        # open() itself migrates here: a database that was never migrated is what this is for
        await app.open(migrate_schema=True)
        try:
            return await app.migrate()
        finally:
            await app.close()

    try:
        before, after = _run(run())
    except (DataloaderError, typer.Exit):
        raise  # its own code and exit code (_Commands), or a SIGTERM's
    except Exception as exc:
        _fail(f"migration failed: {exc}")
    _print({"from_revision": before, "to_revision": after})


@db_app.command("storage")
def db_storage(
    sample: Annotated[bool, typer.Option("--sample", help="Take a storage sample now first (the leader "
                                         "takes one every DL_STORAGE_SAMPLE_SEC)")] = False,
) -> None:
    """The queue's tables in the newest storage sample: sizes, 1h/6h/24h change, dead tuples, last
    autovacuum and autoanalyze, and what holds the xmin horizon (docs/observability.md "Storage")."""

    async def run(app: App) -> dict[str, Any]:
        report = await (app.health.sample_storage() if sample else app.health.storage())
        return report.to_dict()

    _print(_with_app(run))
