"""What every command group shares: the one answer to an error (`_Commands`: one line and the exit
code of docs/errors.md), the global options, the settings check, JSON output, the event loop a
command runs on, and opening the App a command talks to."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import sys
import threading
import uuid
from datetime import datetime
from typing import TYPE_CHECKING, Annotated, Any

import typer
from typer.core import TyperGroup, TyperOption

from dataloader.config import Settings, load_settings
from dataloader.exceptions import DatabaseUnavailable, DataloaderError, ValidationFailed, exit_code
from dataloader.model.principal import Principal, acting_as

if TYPE_CHECKING:
    from dataloader.app import App

# `--debug`: a dataloader error is raised with its traceback instead of printed as one line.
_debug = False
# `--verbose`: a command logs at INFO (the embedded server, migrations) beside its answer.
_verbose = False


class _Commands(TyperGroup):
    """Every command runs inside `invoke` of the top group, so this is the one place that turns a
    dataloader error into the CLI's answer: one line `dataloader: <code>: <message>` on stderr
    (`configuration error` for a setting) and the exit code of docs/errors.md (2 for bad input or
    configuration, 1 for a failed operation), never a traceback unless --debug. A connection
    error that escapes a command is DatabaseUnavailable here, as in the HTTP API."""

    def invoke(self, ctx: typer.Context) -> Any:
        from dataloader.storage.db import is_connection_error

        try:
            return super().invoke(ctx)
        except DataloaderError as exc:
            if _debug:
                raise
            _report(exc)
        except typer.BadParameter as exc:  # an option's value (or a missing one): HTTP's validation_error
            if _debug:
                raise
            _report(ValidationFailed(exc.format_message()))
        except BrokenPipeError:  # stdout closed by the reader (`dataloader --help | head`): not a database error
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # so the exit's flush is quiet
            raise typer.Exit(1) from None
        except Exception as exc:
            if _debug or not is_connection_error(exc):
                raise
            _report(DatabaseUnavailable(f"the database cannot be reached: {exc or type(exc).__name__}"))


def _flag_type(self: TyperOption, ctx: Any) -> str | None:
    """The type column of `--help`: none for a flag. Typer 0.29 shows every option's Python type,
    so a flag (`--debug`, `--reaper/--no-reaper`, `--help`) read `--debug <bool>`, as if it took a
    value."""
    if self.is_flag:
        return None
    return _option_type(self, ctx)


_option_type = TyperOption.display_type_rich
TyperOption.display_type_rich = _flag_type  # type: ignore[method-assign]


def _report(exc: DataloaderError) -> None:
    label = "configuration error" if exc.code == "config_error" else exc.code
    message = " ".join(str(exc).split("\n"))  # one line, whatever the message holds
    typer.echo(f"dataloader: {label}: {message}", err=True)
    raise typer.Exit(exit_code(exc)) from None


def _version(value: bool) -> None:
    if value:
        from dataloader.version import __version__

        typer.echo(f"dataloader {__version__}")
        raise typer.Exit()


def _options(
    debug: Annotated[bool, typer.Option("--debug", help="Show the traceback of an error")] = False,
    verbose: Annotated[bool, typer.Option("--verbose", help="Log at INFO beside a command's answer (the "
                                          "embedded server, migrations); DL_LOG_LEVEL sets any level")] = False,
    version: Annotated[bool, typer.Option("--version", callback=_version, is_eager=True,
                                          help="Print the version and exit")] = False,
) -> None:
    global _debug, _verbose
    _debug, _verbose = debug, verbose


def _settings(*, service: bool = False) -> Settings:
    """Settings, logging, the user's pipelines and every duty's settings, all checked before
    anything is started: any problem is a ConfigError (one line, exit code 2; see _Commands).

    A command's output is its answer: it logs warnings and errors only, unless --verbose or
    DL_LOG_LEVEL asks for more. The services (`service`: serve, worker) log at DL_LOG_LEVEL (INFO),
    as services do."""
    from dataloader.logger import setup_logging
    from dataloader.node import check_duty_settings
    from dataloader.workers.pipelines.registry import load_pipeline_modules

    settings = load_settings()
    level = settings.log_level
    if not service and not _verbose and "log_level" not in settings.model_fields_set:
        level = "WARNING"
    setup_logging(level, settings.log_format)
    check_duty_settings(settings)
    _working_dir_on_sys_path()
    load_pipeline_modules(settings.pipeline_module_names)
    return settings


def _working_dir_on_sys_path() -> None:
    """`DL_PIPELINE_MODULES=myjobs` finds ./myjobs.py, as `python -m`, uvicorn and celery find the
    modules of the directory they are started in. A console script's sys.path starts with the
    script's own directory (the venv's bin/), not the working directory, so add it first."""
    cwd = os.getcwd()
    if not any(os.path.abspath(entry or ".") == cwd for entry in sys.path):
        sys.path.insert(0, cwd)


def _fail(message: str, code: int = 1) -> None:
    typer.echo(f"dataloader: {message}", err=True)
    raise typer.Exit(code)


def _print(data: Any) -> None:
    typer.echo(json.dumps(data, indent=2, default=_json_value))


def _json_value(value: Any) -> Any:
    """A value json cannot write: a time in the one form of every face (ISO 8601, UTC, Z: the
    HTTP API's), anything else (ids, decimals) as its text."""
    from dataloader.model.clock import iso

    return iso(value) if isinstance(value, datetime) else str(value)


def new_event_loop() -> asyncio.AbstractEventLoop:
    """The loop every command runs on: uvloop where installed (as uvicorn picks for `serve`), so
    `serve` and `worker` run the engine on the same loop."""
    try:
        import uvloop
    except ImportError:
        return asyncio.new_event_loop()
    return uvloop.new_event_loop()


def _run(main: Any) -> Any:
    """Run a command's coroutine. SIGTERM (`timeout`, a container stop) cancels it, so its
    `finally` blocks run (the App closes, and stops the embedded server it started) and the command
    exits 143, instead of dying at once with the server left behind."""

    async def stoppable() -> Any:
        task = asyncio.current_task()
        assert task is not None
        loop = asyncio.get_running_loop()
        # Signals reach only the main thread (an in-process test runs commands in others).
        handled = threading.current_thread() is threading.main_thread()
        if handled:
            loop.add_signal_handler(signal.SIGTERM, task.cancel)
        try:
            return await main
        finally:
            if handled:
                loop.remove_signal_handler(signal.SIGTERM)

    with asyncio.Runner(loop_factory=new_event_loop) as runner:
        try:
            return runner.run(stoppable())
        except asyncio.CancelledError:
            typer.echo("dataloader: stopped by SIGTERM", err=True)
            raise typer.Exit(128 + signal.SIGTERM) from None


def _exit(code: int) -> None:
    """Leave without joining leftover pipeline threads (see run_until_stopped)."""
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def _cli_app(settings: Settings) -> App:
    """The CLI is a tool of the service, so like `serve` it uses the embedded PostgreSQL (the same
    data directory) when DL_DB_DSN is unset."""
    from dataloader.app import App

    return App(settings, embedded=True)


def cli_principal() -> Principal:
    """Who a command acts for: the OS user that runs it. The CLI holds the database's credentials,
    so it may do what an admin may; the audit trail names the user (`cli:alice`)."""
    import getpass

    from dataloader.model.principal import PrincipalKind, Role

    try:
        name = getpass.getuser()
    except (KeyError, OSError):  # no passwd entry and no LOGNAME/USER (a bare container): the uid
        name = f"uid{os.getuid()}"
    return Principal.with_role(PrincipalKind.CLI, name, Role.ADMIN)


def _with_app(fn: Any) -> Any:
    settings = _settings()

    async def run() -> Any:
        with acting_as(cli_principal()):
            return await in_app()

    async def in_app() -> Any:
        app = _cli_app(settings)
        await app.open(migrate_schema=True)
        # The CLI answers for the queues of the service it is a tool of (WORKERS_JSON), so a task
        # that service would fail is refused here as `serve` refuses it (JobManager's rule).
        configured = frozenset(w.queue for w in settings.workers)
        app.jobs.served_queues = lambda: configured
        try:
            return await fn(app)
        finally:
            await app.close()

    return _run(run())


def _uuid_argument(value: str, what: str) -> uuid.UUID:
    """A UUID given on the command line; otherwise the one-line error (exit 2) saying it is not `what`."""
    try:
        return uuid.UUID(value)
    except ValueError:
        raise typer.BadParameter(f"{value!r} is not {what}") from None


def _json_option(name: str, text: str) -> Any:
    """A JSON option's value; text that is not JSON is the invalid_json HTTP gives such a body."""
    from dataloader.exceptions import InvalidJson

    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise InvalidJson(f"--{name} is not JSON: {exc.msg} at char {exc.pos}") from None
