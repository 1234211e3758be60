"""Command line: `dataloader serve|worker|db|jobs`. A bare `dataloader` prints help (exit 2, as click
does for a group called without a command); `python -m dataloader` with no arguments runs the
service instead (see __main__.py)."""

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
from typer.core import TyperGroup

from dataloader.config import Settings, load_settings
from dataloader.exceptions import DatabaseUnavailable, DataloaderError, ValidationFailed, exit_code
from dataloader.heap import freeze_startup_objects

if TYPE_CHECKING:
    from dataloader.app import App

log = logging.getLogger("dataloader")

# `--debug`: a dataloader error is raised with its traceback instead of printed as one line.
_debug = False


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


def _report(exc: DataloaderError) -> None:
    label = "configuration error" if exc.code == "config_error" else exc.code
    message = " ".join(str(exc).split("\n"))  # one line, whatever the message holds
    typer.echo(f"dataloader: {label}: {message}", err=True)
    raise typer.Exit(exit_code(exc)) from None


app = typer.Typer(
    cls=_Commands, no_args_is_help=True, add_completion=True, pretty_exceptions_enable=False,
    help="Durable background jobs on PostgreSQL. Errors: one line and exit code 2 (bad input or "
         "configuration) or 1 (a failed operation); see docs/errors.md.",
)
db_app = typer.Typer(help="Database schema.", no_args_is_help=True)
jobs_app = typer.Typer(help="Enqueue, inspect, cancel and retry jobs.", no_args_is_help=True)
app.add_typer(db_app, name="db")
app.add_typer(jobs_app, name="jobs")


def _version(value: bool) -> None:
    if value:
        from dataloader.version import __version__

        typer.echo(f"dataloader {__version__}")
        raise typer.Exit()


@app.callback()
def _options(
    debug: Annotated[bool, typer.Option("--debug", help="Show the traceback of an error")] = False,
    version: Annotated[bool, typer.Option("--version", callback=_version, is_eager=True,
                                          help="Print the version and exit")] = False,
) -> None:
    global _debug
    _debug = debug


def _settings() -> Settings:
    """Settings, logging, the user's pipelines and every duty's settings, all checked before
    anything is started: any problem is a ConfigError (one line, exit code 2; see _Commands)."""
    from dataloader.logger import setup_logging
    from dataloader.maintenance.duty_settings import check_duty_settings
    from dataloader.workers.pipelines.registry import load_pipeline_modules

    settings = load_settings()
    setup_logging(settings.log_level, settings.log_format)
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


def _signal_future() -> asyncio.Future[str]:
    """Resolves with the name of the first SIGTERM/SIGINT. Installed before the workers start: a
    signal in the window between "workers started" and the wait would otherwise kill the process
    with the default action (exit -15, no graceful hand-back)."""
    loop = asyncio.get_running_loop()
    stop: asyncio.Future[str] = loop.create_future()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, lambda s=sig: stop.done() or stop.set_result(signal.Signals(s).name))
    return stop


@app.command()
def serve(
    host: Annotated[str | None, typer.Option(help="Bind address (env DL_HOST, default 127.0.0.1)")] = None,
    port: Annotated[int | None, typer.Option(help="Port (env DL_PORT, default 8000)")] = None,
) -> None:
    """Run the HTTP API, the workers of WORKERS_JSON and the reaper in one process."""
    settings = _settings()
    from dataloader.api.server import run_server

    code = run_server(settings, host=host or settings.host, port=settings.port if port is None else port)
    _exit(code)


@app.command()
def worker(
    reaper: Annotated[bool, typer.Option("--reaper/--no-reaper", help="Also run the reaper")] = True,
) -> None:
    """Run the workers of WORKERS_JSON (and the reaper) without HTTP, until SIGTERM/SIGINT."""
    settings = _settings()
    _exit(run_until_stopped(_run_worker(settings, reaper)))


def new_event_loop() -> asyncio.AbstractEventLoop:
    """The loop every command runs on: uvloop where installed (as uvicorn picks for `serve`), so
    `serve` and `worker` run the engine on the same loop."""
    try:
        import uvloop
    except ImportError:
        return asyncio.new_event_loop()
    return uvloop.new_event_loop()


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


def _with_app(fn: Any) -> Any:
    settings = _settings()

    async def run() -> Any:
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


def _job_id(value: str) -> uuid.UUID:
    try:
        return uuid.UUID(value)
    except ValueError:
        raise typer.BadParameter(f"{value!r} is not a UUID") from None


@jobs_app.command("trigger")
def jobs_trigger(
    task: Annotated[str, typer.Option(help="Pipeline name, e.g. dl.sleep")],
    lock_key: Annotated[str | None, typer.Option(
        help="Jobs with the same lock_key never run at once (default: the job's own id)")] = None,
    queue: Annotated[str, typer.Option()] = "default",
    args: Annotated[str, typer.Option(help="JSON object")] = "{}",
    idempotency_key: Annotated[str | None, typer.Option()] = None,
    partition_key: Annotated[str, typer.Option()] = "",
    priority: Annotated[int, typer.Option(help="Lower runs first")] = 100,
    available_at: Annotated[str | None, typer.Option(help="RFC 3339 time with timezone")] = None,
    delay: Annotated[float | None, typer.Option(help="Seconds from now (instead of --available-at)")] = None,
    max_attempts: Annotated[int | None, typer.Option()] = None,
    lease_ttl_sec: Annotated[int | None, typer.Option(
        help="Lease of each attempt, renewed by heartbeats (default: DL_DEFAULT_LEASE_TTL_SEC)")] = None,
    timeout_sec: Annotated[int | None, typer.Option(help="Run-time limit of each attempt, seconds")] = None,
    then: Annotated[list[str] | None, typer.Option(
        help="A stage to run after it succeeds: a task name, or a JSON Stage object; repeat for a chain")] = None,
    restartable: Annotated[bool, typer.Option(
        help="The lock_key re-triggers: updates the queued job, or runs once more after the running one")] = False,
    unique_for_sec: Annotated[int | None, typer.Option(
        help="At most one such job (task, queue, --unique-key or args) per window of this many seconds")] = None,
    unique_key: Annotated[str | None, typer.Option(help="What makes jobs the same for --unique-for-sec")] = None,
) -> None:
    """Enqueue a job; prints its id and status."""
    from dataloader.jobs.enqueue import job_request
    from dataloader.jobs.manager import status_view

    # The Python API's own request builder, checked before anything opens: the same model,
    # defaults and errors as App.enqueue (and the HTTP body).
    req = job_request(task, _json_option("args", args), queue=queue, lock_key=lock_key,
                      idempotency_key=idempotency_key, partition_key=partition_key, priority=priority,
                      available_at=_time_option("available-at", available_at), delay=delay,
                      max_attempts=max_attempts, lease_ttl_sec=lease_ttl_sec, timeout_sec=timeout_sec,
                      then=[_stage(item) for item in then or ()], restartable=restartable,
                      unique_for=unique_for_sec, unique_key=unique_key)

    async def run(app: App) -> dict[str, Any]:
        result = await app.jobs.trigger(req, producer="cli")
        return {**status_view(result.job), "created": result.created}

    _print(_with_app(run))


def _json_option(name: str, text: str) -> Any:
    """A JSON option's value; text that is not JSON is the invalid_json HTTP gives such a body."""
    from dataloader.exceptions import InvalidJson

    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise InvalidJson(f"--{name} is not JSON: {exc.msg} at char {exc.pos}") from None


def _time_option(name: str, text: str | None) -> datetime | None:
    if text is None:
        return None
    try:
        return datetime.fromisoformat(text)
    except ValueError:
        raise ValidationFailed(f"--{name}: must be an RFC 3339 time with a timezone, e.g. 2030-01-01T12:00:00Z",
                               [{"loc": [name.replace("-", "_")], "msg": "must be an RFC 3339 time",
                                 "type": "datetime_parsing"}]) from None


def _stage(text: str) -> Any:
    """--then: a task name, or a JSON object with Stage's fields."""
    return _json_option("then", text) if text.lstrip().startswith("{") else {"task": text}


@jobs_app.command("chain")
def jobs_chain(chain_or_job_id: str) -> None:
    """Show a chain (multi-stage run) with its stages, by the chain's id or any of its jobs' ids."""
    jid = _job_id(chain_or_job_id)

    async def run(app: App) -> dict[str, Any]:
        return (await app.chain(jid)).to_dict()

    _print(_with_app(run))


@jobs_app.command("status")
def jobs_status(job_id: str) -> None:
    """Show a job's status."""
    from dataloader.jobs.manager import status_view

    jid = _job_id(job_id)

    async def run(app: App) -> dict[str, Any]:
        return status_view(await app.get(jid))

    _print(_with_app(run))


@jobs_app.command("cancel")
def jobs_cancel(job_id: str) -> None:
    """Cancel a job: at once if queued, at its next chunk if running."""
    from dataloader.jobs.manager import status_view

    jid = _job_id(job_id)

    async def run(app: App) -> dict[str, Any]:
        return status_view(await app.cancel(jid))

    _print(_with_app(run))


@jobs_app.command("retry")
def jobs_retry(job_id: str) -> None:
    """Put a failed, canceled or lost job back to the queue, with a fresh attempt budget."""
    from dataloader.jobs.manager import status_view

    jid = _job_id(job_id)

    async def run(app: App) -> dict[str, Any]:
        return status_view(await app.retry(jid))

    _print(_with_app(run))


@jobs_app.command("list")
def jobs_list(
    queue: Annotated[str | None, typer.Option()] = None,
    task: Annotated[str | None, typer.Option()] = None,
    status: Annotated[list[str] | None, typer.Option(help="Repeat for several")] = None,
    limit: Annotated[int, typer.Option(min=1, max=500)] = 50,
    cursor: Annotated[str | None, typer.Option(help="next_cursor of the previous page")] = None,
) -> None:
    """List jobs, newest first (without args)."""

    async def run(app: App) -> dict[str, Any]:
        page = await app.list(queue=queue, task=task, status=status, limit=limit, cursor=cursor)
        return {"jobs": [{k: v for k, v in job.to_dict().items() if k != "args"} for job in page.jobs],
                "next_cursor": page.next_cursor}

    _print(_with_app(run))


@jobs_app.command("events")
def jobs_events(job_id: str) -> None:
    """Print a job's journal."""
    jid = _job_id(job_id)

    async def run(app: App) -> list[dict[str, Any]]:
        return [event.to_dict() for event in await app.events(jid)]

    _print(_with_app(run))


def main(argv: list[str] | None = None) -> None:
    """Entry point of the `dataloader` script (argv None: sys.argv)."""
    if not sys.stdout.isatty() and "COLUMNS" not in os.environ and "TERMINAL_WIDTH" not in os.environ:
        # Rich lays out --help for 80 columns when it cannot ask a terminal (a pipe, a pager, a CI
        # log), cutting the options' help into slivers; a pipe has no width to respect.
        os.environ["COLUMNS"] = "120"
    app(args=argv)


# --- retention and stats (issue 10; docs/patterns.md "Retention" and "Stats") ---------------------


@jobs_app.command("prune")
def jobs_prune(
    older_than: Annotated[str | None, typer.Option(
        help="Delete finished jobs older than this (7d, 12h, 90m, seconds); default: the configured retention")] = None,
    status: Annotated[list[str] | None, typer.Option(
        help="succeeded, canceled, failed or lost; repeat for several (default: all four)")] = None,
    queue: Annotated[list[str] | None, typer.Option(help="Only this queue; repeat for several")] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Only count what would be deleted")] = False,
) -> None:
    """Delete finished jobs (with their journal rows) in small batches; prints the counts."""
    from dataloader.model.job import FINISHED_STATUS_NAMES as FINISHED_STATUSES

    bad = sorted(set(status or ()) - set(FINISHED_STATUSES))
    if bad:
        raise typer.BadParameter(f"not a finished status: {', '.join(bad)} (allowed: {', '.join(FINISHED_STATUSES)})")
    seconds: float | None = None
    if older_than is not None:
        try:
            seconds = Settings.duration_seconds(older_than)
        except ValueError as exc:
            raise typer.BadParameter(str(exc)) from None
        if seconds < 0:
            raise typer.BadParameter("--older-than must not be negative")

    async def run(app: App) -> dict[str, Any]:
        report = await app.prune(older_than=seconds, statuses=status, queues=queue, dry_run=dry_run)
        return report.to_dict()

    _print(_with_app(run))


@app.command("stats")
def stats_command(
    queue: Annotated[str | None, typer.Option(help="One queue (default: all)")] = None,
    hours: Annotated[float, typer.Option(min=1 / 60, max=366 * 24, help="How many hours back")] = 24,
    errors: Annotated[bool, typer.Option("--errors", help="Top errors of the period instead")] = False,
    rollup: Annotated[bool, typer.Option("--rollup/--no-rollup",
                                         help="Roll up recently finished jobs first")] = True,
) -> None:
    """Finished jobs per queue and hour (counts by status, run and wait time), or the top errors."""
    from datetime import UTC, timedelta

    async def run(app: App) -> dict[str, Any]:
        if rollup:
            await app.rollup_stats()
        since = datetime.now(UTC) - timedelta(hours=hours)
        if errors:
            return await app.stats_errors(queue=queue, since=since)
        return await app.stats(queue=queue, hours=hours)

    _print(_with_app(run))


# --- periodic schedules (issue 10; docs/patterns.md "Periodic schedules") --------------------------

schedules_app = typer.Typer(help="Periodic schedules: list, create, pause, resume, delete, history.",
                            no_args_is_help=True)
app.add_typer(schedules_app, name="schedules")


def _schedule_view(app: App, schedule: Any) -> dict[str, Any]:
    body = schedule.to_dict()
    body.pop("revision", None)
    body["upcoming"] = app.schedules.upcoming(schedule)  # the one default (docs: the next 5)
    return body


@schedules_app.command("list")
def schedules_list() -> None:
    """Every schedule with its next run times."""

    async def run(app: App) -> list[dict[str, Any]]:
        return [_schedule_view(app, s) for s in await app.schedules.list()]

    _print(_with_app(run))


@schedules_app.command("create")
def schedules_create(
    name: Annotated[str, typer.Option(help="Unique name")],
    task: Annotated[str, typer.Option(help="Pipeline name")],
    cron: Annotated[str | None, typer.Option(help="5-field cron, e.g. '0 2 * * *'")] = None,
    every: Annotated[float | None, typer.Option(help="Interval in seconds (instead of --cron)")] = None,
    tz: Annotated[str, typer.Option(help="IANA time zone of --cron")] = "UTC",
    queue: Annotated[str, typer.Option()] = "default",
    args: Annotated[str, typer.Option(help="JSON object")] = "{}",
    missed: Annotated[str, typer.Option(help="skip, run_once or catch_up")] = "run_once",
    catch_up_limit: Annotated[int, typer.Option()] = 10,
    lock_key: Annotated[str | None, typer.Option()] = None,
) -> None:
    """Create a schedule (one declared in code with @schedule is created at start instead)."""
    from dataloader.schedules.manager import ScheduleManager

    # The service's own check: its error, with its code, is the CLI's line (_Commands).
    spec = ScheduleManager.spec(name=name, task=task, cron=cron, every_sec=every, tz=tz, queue=queue,
                                args=_json_option("args", args), missed=missed, catch_up_limit=catch_up_limit,
                                lock_key=lock_key)

    async def run(app: App) -> dict[str, Any]:
        return _schedule_view(app, await app.schedules.create(spec))

    _print(_with_app(run))


@schedules_app.command("pause")
def schedules_pause(name: str) -> None:
    """Pause a schedule: no tick enqueues until it is resumed."""

    async def run(app: App) -> dict[str, Any]:
        return _schedule_view(app, await app.schedules.pause(name))

    _print(_with_app(run))


@schedules_app.command("resume")
def schedules_resume(name: str) -> None:
    """Resume a schedule from its first tick after now."""

    async def run(app: App) -> dict[str, Any]:
        return _schedule_view(app, await app.schedules.resume(name))

    _print(_with_app(run))


@schedules_app.command("delete")
def schedules_delete(name: str) -> None:
    """Delete a schedule and its history (the jobs it enqueued stay)."""

    async def run(app: App) -> dict[str, Any]:
        await app.schedules.delete(name)
        return {"deleted": name}

    _print(_with_app(run))


@schedules_app.command("history")
def schedules_history(
    name: str,
    limit: Annotated[int, typer.Option(min=1, max=1000)] = 20,
) -> None:
    """What each tick enqueued (newest first): tick time, job id, the job's status now."""

    async def run(app: App) -> list[dict[str, Any]]:
        return [r.to_dict() for r in await app.schedules.history(name, limit=limit)]

    _print(_with_app(run))


# --- recovery and operations (issue 11; docs/operations.md) ---------------------------------------

ops_app = typer.Typer(help="Recovery: search jobs, top errors, bulk requeue/cancel/delete/priority with progress.",
                      no_args_is_help=True)
app.add_typer(ops_app, name="ops")

QueueOpt = Annotated[list[str] | None, typer.Option("--queue", help="Repeat for several")]
TaskOpt = Annotated[list[str] | None, typer.Option("--task", help="Repeat for several")]
StatusOpt = Annotated[list[str] | None, typer.Option("--status", help="Repeat for several")]
ErrorOpt = Annotated[str | None, typer.Option("--error", help="Error text pattern: * any text, ? one character")]
TimeOpt = Annotated[str | None, typer.Option(help="RFC 3339 time with a zone, or an age like 2h / 30m / 7d")]
ArgsOpt = Annotated[str | None, typer.Option("--args-contains", help="JSON object the args contain")]
PathOpt = Annotated[str | None, typer.Option("--args-path", help='jsonpath over the args, e.g. \'$.id ? (@ > 5)\'')]
PrefixOpt = Annotated[str | None, typer.Option("--lock-key-prefix")]
HeldOpt = Annotated[bool | None, typer.Option("--held/--not-held", help="Only held jobs / only jobs not held")]


def _when(name: str, value: str | None) -> datetime | None:
    """An RFC 3339 time, or an age back from now ("2h": two hours ago)."""
    from datetime import UTC, timedelta

    if value is None:
        return None
    try:
        when = datetime.fromisoformat(value)
    except ValueError:
        try:
            return datetime.now(UTC) - timedelta(seconds=Settings.duration_seconds(value))
        except ValueError:
            raise typer.BadParameter(f"--{name}: not a time with a zone nor an age like 2h") from None
    if when.tzinfo is None:
        raise typer.BadParameter(f"--{name}: give a time zone (e.g. 2030-01-01T02:00:00Z)")
    return when


def _filter(queue: list[str] | None, task: list[str] | None, status: list[str] | None, error: str | None,
            created_from: str | None, created_to: str | None, finished_from: str | None, finished_to: str | None,
            args_contains: str | None, args_path: str | None, lock_key_prefix: str | None, held: bool | None
            ) -> dict[str, Any]:
    try:
        contains = json.loads(args_contains) if args_contains is not None else None
    except json.JSONDecodeError as exc:
        raise typer.BadParameter(f"--args-contains is not JSON: {exc.msg}") from None
    values = {"queues": queue or None, "tasks": task or None, "statuses": status or None, "error": error,
              "created_from": _when("created-from", created_from), "created_to": _when("created-to", created_to),
              "finished_from": _when("finished-from", finished_from),
              "finished_to": _when("finished-to", finished_to), "args_contains": contains,
              "args_path": args_path, "lock_key_prefix": lock_key_prefix, "held": held}
    from dataloader.exceptions import InvalidJobRequest
    from dataloader.jobs.search import parse_filter

    try:
        return parse_filter({k: v for k, v in values.items() if v is not None}).describe()
    except InvalidJobRequest as exc:
        raise typer.BadParameter(str(exc)) from None


@ops_app.command("search")
def ops_search(
    queue: QueueOpt = None, task: TaskOpt = None, status: StatusOpt = None, error: ErrorOpt = None,
    created_from: TimeOpt = None, created_to: TimeOpt = None, finished_from: TimeOpt = None,
    finished_to: TimeOpt = None, args_contains: ArgsOpt = None, args_path: PathOpt = None,
    lock_key_prefix: PrefixOpt = None, held: HeldOpt = None,
    limit: Annotated[int, typer.Option(min=1, max=500)] = 50,
    cursor: Annotated[str | None, typer.Option(help="next_cursor of the previous page")] = None,
    count: Annotated[bool, typer.Option("--count/--no-count", help="Also count every match")] = True,
) -> None:
    """Jobs matching the filter, newest first (without args), with the count of all matches."""
    f = _filter(queue, task, status, error, created_from, created_to, finished_from, finished_to, args_contains,
                args_path, lock_key_prefix, held)

    async def run(app: App) -> dict[str, Any]:
        page = await app.search(f, cursor=cursor, limit=limit, count=count)
        body = page.to_dict()
        body["jobs"] = [{k: v for k, v in job.items() if k != "args"} for job in body["jobs"]]
        return body

    _print(_with_app(run))


@ops_app.command("errors")
def ops_errors(
    queue: Annotated[str | None, typer.Option(help="One queue (default: all)")] = None,
    hours: Annotated[float, typer.Option(min=1 / 60, max=366 * 24, help="How many hours back")] = 1,
    limit: Annotated[int, typer.Option(min=1, max=500)] = 20,
) -> None:
    """Top errors of the last hour (or --hours): failed and lost jobs grouped by error text."""
    from datetime import UTC, timedelta

    async def run(app: App) -> dict[str, Any]:
        await app.rollup_stats()
        return await app.stats_errors(queue=queue, since=datetime.now(UTC) - timedelta(hours=hours), limit=limit)

    _print(_with_app(run))


# --- observers and the node registry (issue 12; docs/observers.md) ---------------------------------

observers_app = typer.Typer(help="Observers (never-ending work spread over the nodes): list, get, create, stop.",
                            no_args_is_help=True)
app.add_typer(observers_app, name="observers")


@observers_app.command("list")
def observers_list(
    state: Annotated[str | None, typer.Option(help="created, processing, on_deleting, deleted, failed")] = None,
    kind: Annotated[str | None, typer.Option()] = None,
    node: Annotated[str | None, typer.Option(help="Node name")] = None,
    limit: Annotated[int, typer.Option(min=1, max=10_000)] = 1000,
) -> None:
    """Observers by name, with the node running each and its state."""

    async def run(app: App) -> list[dict[str, Any]]:
        return [o.to_dict() for o in await app.observers.list(state=state, kind=kind, node=node, limit=limit)]

    _print(_with_app(run))


@observers_app.command("get")
def observers_get(name: str) -> None:
    """One observer."""

    async def run(app: App) -> dict[str, Any]:
        return (await app.observers.get(name)).to_dict()

    _print(_with_app(run))


@observers_app.command("create")
def observers_create(
    name: Annotated[str, typer.Option(help="Unique name")],
    kind: Annotated[str, typer.Option(help="The @observer kind (its module in DL_PIPELINE_MODULES)")],
    args: Annotated[str, typer.Option(help="JSON object")] = "{}",
    max_restarts: Annotated[int | None, typer.Option(help="Crashes in a row before it is left failed")] = None,
) -> None:
    """Create an observer: it waits in `created` until a node with spare capacity takes it."""
    from dataloader.observers.manager import ObserverManager

    # The service's own check: its error, with its code, is the CLI's line (_Commands).
    spec = ObserverManager.spec(name=name, kind=kind, args=_json_option("args", args), max_restarts=max_restarts)

    async def run(app: App) -> dict[str, Any]:
        return (await app.observers.create(spec)).to_dict()

    _print(_with_app(run))


@observers_app.command("stop")
def observers_stop(
    name: str,
    wait: Annotated[float, typer.Option(min=0, max=3600, help="Seconds to wait for `deleted`")] = 10,
) -> None:
    """Stop an observer by name; prints it (`deleted`, or `on_deleting` if its node has not
    confirmed within --wait; exit code 3 then)."""

    async def run(app: App) -> dict[str, Any]:
        return (await app.observers.stop(name, wait=wait)).to_dict()

    stopped = _with_app(run)
    _print(stopped)
    if stopped["state"] != "deleted":
        _exit(3)


@app.command("nodes")
def nodes_command(
    all_incarnations: Annotated[bool, typer.Option("--all", help="Also dead and stopped incarnations")] = False,
) -> None:
    """The node registry: each service instance (incarnation), its heartbeat, capacity and load."""

    async def run(app: App) -> list[dict[str, Any]]:
        return [n.to_dict() for n in await app.observers.nodes(include_ended=all_incarnations)]

    _print(_with_app(run))

# --- processes (issue 9; docs/processes.md) ----------------------------------------------------------

processes_app = typer.Typer(help="Processes: get, list, trace, repair, simple-repair, remove, restart, check.",
                            no_args_is_help=True)
app.add_typer(processes_app, name="processes")


@processes_app.command("get")
def processes_get(
    ns: str,
    process_id: str,
    offset: Annotated[int, typer.Option(min=0, help="Event id to start after (forward) or before (backward)")] = 0,
    limit: Annotated[int | None, typer.Option(min=1, max=100_000, help="Events at most (default: all)")] = None,
    backward: Annotated[bool, typer.Option(help="Newest events first")] = False,
) -> None:
    """A process with (a page of) its history."""

    async def run(app: App) -> dict[str, Any]:
        page = {"offset": offset, "limit": limit, "direction": "backward" if backward else "forward"}
        return (await app.processes.get(ns, process_id, page)).to_dict()

    _print(_with_app(run))


@processes_app.command("list")
def processes_list(
    ns: str,
    status: Annotated[str | None, typer.Option(help="init, running or error")] = None,
    cursor: Annotated[str | None, typer.Option(help="next_cursor of the previous page")] = None,
    limit: Annotated[int, typer.Option(min=1, max=500)] = 100,
) -> None:
    """Processes of a namespace by id (without history)."""

    async def run(app: App) -> dict[str, Any]:
        page = await app.processes.list(ns, status=status, cursor=cursor, limit=limit)
        return {"processes": [{k: v for k, v in p.to_dict().items() if k != "history"} for p in page.processes],
                "next_cursor": page.next_cursor}

    _print(_with_app(run))


@processes_app.command("trace")
def processes_trace(ns: str, process_id: str) -> None:
    """Every task of a process with the events it produced."""

    async def run(app: App) -> list[dict[str, Any]]:
        return [entry.to_dict() for entry in await app.processes.trace(ns, process_id)]

    _print(_with_app(run))


@processes_app.command("repair")
def processes_repair(
    ns: str,
    process_id: str,
    args: Annotated[str, typer.Option(help="JSON args for the processor's repair")] = "null",
    timeout: Annotated[float, typer.Option(min=0.001, max=3600, help="Seconds to wait for the result")] = 30,
) -> None:
    """Run the processor's repair on a process in error (a worker serving process:<ns> runs it)."""
    try:
        parsed = json.loads(args)
    except json.JSONDecodeError as exc:
        raise typer.BadParameter(f"--args is not JSON: {exc.msg}") from None

    async def run(app: App) -> dict[str, Any]:
        return {"response": await app.processes.repair(ns, process_id, parsed, timeout=timeout)}

    _print(_with_app(run))


@processes_app.command("simple-repair")
def processes_simple_repair(ns: str, process_id: str) -> None:
    """Clear a process's error without calling its processor (its broken timer is scheduled again)."""

    async def run(app: App) -> dict[str, Any]:
        return (await app.processes.simple_repair(ns, process_id)).to_dict()

    _print(_with_app(run))


@processes_app.command("remove")
def processes_remove(ns: str, process_id: str) -> None:
    """Delete a process and all its rows."""

    async def run(app: App) -> dict[str, Any]:
        await app.processes.remove(ns, process_id)
        return {"removed": process_id, "ns": ns}

    _print(_with_app(run))


def _restart_point(from_: str | None, from_task: str | None, from_event: int | None) -> dict[str, Any]:
    given = [v for v in (from_, from_task, from_event) if v is not None]
    if len(given) != 1:
        raise typer.BadParameter("give exactly one of --from (start|error), --from-task, --from-event")
    return {"from_": from_, "task_id": from_task, "event_id": from_event}


FromOpt = Annotated[str | None, typer.Option("--from", help="start (its first init) or error (the task that broke it)")]
FromEventOpt = Annotated[int | None, typer.Option("--from-event", min=1, help="The task that wrote this event")]


@processes_app.command("restart")
def processes_restart(
    ns: str,
    process_id: str,
    from_: FromOpt = None,
    from_task: Annotated[str | None, typer.Option("--from-task", help="A task id of the process (see trace)")] = None,
    from_event: FromEventOpt = None,
) -> None:
    """Put a process back to the state a task found and run that task and the later calls again
    (with the processor's current code; a worker serving process:<ns> runs them)."""
    point = _restart_point(from_, from_task, from_event)

    async def run(app: App) -> dict[str, Any]:
        return (await app.processes.restart(ns, process_id, **point)).to_dict()

    _print(_with_app(run))


@processes_app.command("check")
def processes_check(
    ns: str,
    repair: Annotated[bool, typer.Option("--repair", help="Repair what can be repaired (else only report)")] = False,
    limit: Annotated[int, typer.Option(min=1, max=1000, help="Processes per page")] = 500,
) -> None:
    """Consistency check of a whole namespace, page by page: processes whose state and tasks
    disagree, and idle ones. Exit code 3 when something is left unrepaired."""

    async def run(app: App) -> dict[str, Any]:
        findings: list[dict[str, Any]] = []
        examined, cursor = 0, None
        while True:
            page = await app.processes.check(ns, repair=repair, cursor=cursor, limit=limit)
            findings += [f.to_dict() for f in page.findings]
            examined += page.examined
            if page.next_cursor is None:
                return {"ns": ns, "examined": examined, "findings": findings}
            cursor = page.next_cursor

    report = _with_app(run)
    _print(report)
    if any(not f["repaired"] and f["kind"] != "idle" for f in report["findings"]):
        _exit(3)


def _actor() -> str:
    import getpass

    try:
        return f"cli:{getpass.getuser()}"
    except Exception:  # no user name in this environment (a bare container)
        return "cli"


def _progress_line(op: Any) -> str:
    """The progress bar's text (Rich markup): kind, id, state and changed count. Escaped, since
    "[running]" or "[paused]" is otherwise read as a style tag and prints nothing."""
    from rich.markup import escape

    return escape(f"{op.kind} {str(op.id)[:8]} [{op.state}] changed={op.changed}")


async def _watch(app: App, operation_id: uuid.UUID, interval: float = 0.5) -> dict[str, Any]:
    """A progress bar (done / total) until the operation ends; returns it."""
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    console = Console(stderr=True)
    op = await app.operations.get(operation_id)
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=console, transient=False) as bar:
        task = bar.add_task(f"{op.kind} {str(op.id)[:8]}", total=op.total)
        while True:
            op = await app.operations.get(operation_id)
            bar.update(task, completed=op.done, total=max(op.total, op.done), description=_progress_line(op))
            if op.ended:
                break
            await asyncio.sleep(interval)
    return op.to_dict()


def _bulk(kind: str, f: dict[str, Any], params: dict[str, Any] | None, dry_run: bool, yes: bool, watch: bool,
          batch_size: int | None, what: str = "jobs") -> None:
    async def count(app: App) -> dict[str, Any]:
        return (await app.operations.start(kind, f, params=params, dry_run=True)).to_dict()

    preview = _with_app(count)
    if dry_run:
        _print(preview)
        return
    typer.echo(f"{kind}: {preview['total']} {what} match {json.dumps(f)}", err=True)
    if preview["total"] == 0:  # nothing to confirm nor to watch: the preview is the answer
        _print(preview)
        return
    if not yes and not typer.confirm("start it?", err=True):
        raise typer.Exit(1)

    async def start(app: App) -> dict[str, Any]:
        op = await app.operations.start(kind, f, params=params, started_by=_actor(), batch_size=batch_size)
        if not watch:
            return op.to_dict()
        return await _watch(app, op.id)

    _print(_with_app(start))


DryRunOpt = Annotated[bool, typer.Option("--dry-run", help="Only count the jobs it would examine")]
YesOpt = Annotated[bool, typer.Option("--yes", "-y", help="Do not ask before starting")]
WatchOpt = Annotated[bool, typer.Option("--watch/--no-watch", help="Show progress until it ends")]
BatchOpt = Annotated[int | None, typer.Option(min=1, max=10_000, help="Jobs per batch (DL_OPERATIONS_BATCH_SIZE)")]


def _bulk_command(kind: str, help_text: str) -> None:
    def command(
        queue: QueueOpt = None, task: TaskOpt = None, status: StatusOpt = None, error: ErrorOpt = None,
        created_from: TimeOpt = None, created_to: TimeOpt = None, finished_from: TimeOpt = None,
        finished_to: TimeOpt = None, args_contains: ArgsOpt = None, args_path: PathOpt = None,
        lock_key_prefix: PrefixOpt = None, held: HeldOpt = None, dry_run: DryRunOpt = False, yes: YesOpt = False,
        watch: WatchOpt = True, batch_size: BatchOpt = None,
    ) -> None:
        f = _filter(queue, task, status, error, created_from, created_to, finished_from, finished_to,
                    args_contains, args_path, lock_key_prefix, held)
        _bulk(kind, f, None, dry_run, yes, watch, batch_size)

    command.__doc__ = help_text
    ops_app.command(kind)(command)


_bulk_command("requeue", "Requeue every failed, canceled or lost job matching the filter (fresh attempt budget).")
_bulk_command("cancel", "Cancel every queued or running job matching the filter.")
_bulk_command("delete", "Delete every finished job matching the filter (with its journal).")


@ops_app.command("set-priority")
def ops_set_priority(
    priority: Annotated[int, typer.Argument(min=0, max=2**31 - 1, help="New priority (lower runs first)")],
    queue: QueueOpt = None, task: TaskOpt = None, status: StatusOpt = None, error: ErrorOpt = None,
    created_from: TimeOpt = None, created_to: TimeOpt = None, args_contains: ArgsOpt = None,
    args_path: PathOpt = None, lock_key_prefix: PrefixOpt = None, dry_run: DryRunOpt = False, yes: YesOpt = False,
    watch: WatchOpt = True, batch_size: BatchOpt = None,
) -> None:
    """Give every queued job matching the filter a new priority."""
    f = _filter(queue, task, status, error, created_from, created_to, None, None, args_contains, args_path,
                lock_key_prefix, None)
    _bulk("set_priority", f, {"priority": priority}, dry_run, yes, watch, batch_size)


@ops_app.command("restart-processes")
def ops_restart_processes(
    ns: str,
    status: Annotated[list[str] | None, typer.Option("--status", help="init, running or error; repeatable")] = None,
    process_id: Annotated[list[str] | None, typer.Option("--id", help="Only these process ids; repeatable")] = None,
    detail: Annotated[str | None, typer.Option(help="Pattern over the error detail: * any text, ? one char")] = None,
    from_: FromOpt = None, from_event: FromEventOpt = None, dry_run: DryRunOpt = False, yes: YesOpt = False,
    watch: WatchOpt = True, batch_size: BatchOpt = None,
) -> None:
    """Restart every matching process of a namespace (e.g. --status error --from error after a fixed
    deploy) as a tracked operation with a progress bar."""
    point = _restart_point(from_, None, from_event)
    f: dict[str, Any] = {"ns": ns, "statuses": status, "ids": process_id, "detail": detail}
    params = {"from": point["from_"]} if from_ else {"from_event": point["event_id"]}
    _bulk("process_restart", {k: v for k, v in f.items() if v is not None}, params, dry_run, yes, watch, batch_size,
          what="processes")


def _operation_id(value: str) -> uuid.UUID:
    try:
        return uuid.UUID(value)
    except ValueError:
        raise typer.BadParameter(f"{value!r} is not an operation id (a UUID)") from None


@ops_app.command("list")
def ops_list(
    state: Annotated[list[str] | None, typer.Option(help="running, paused, canceled, finished, failed")] = None,
    limit: Annotated[int, typer.Option(min=1, max=200)] = 20,
) -> None:
    """Bulk operations, newest first, with their progress."""

    async def run(app: App) -> list[dict[str, Any]]:
        items, _ = await app.operations.list(states=state, limit=limit)
        return [o.to_dict() for o in items]

    _print(_with_app(run))


@ops_app.command("show")
def ops_show(operation_id: str) -> None:
    """One operation, with its audit trail."""
    oid = _operation_id(operation_id)

    async def run(app: App) -> dict[str, Any]:
        return {**(await app.operations.get(oid)).to_dict(),
                "events": [e.to_dict() for e in await app.operations.events(oid)]}

    _print(_with_app(run))


@ops_app.command("watch")
def ops_watch(operation_id: str) -> None:
    """A progress bar until the operation ends."""
    oid = _operation_id(operation_id)

    async def run(app: App) -> dict[str, Any]:
        return await _watch(app, oid)

    _print(_with_app(run))


def _state_command(action: str, help_text: str) -> None:
    def command(operation_id: str) -> None:
        oid = _operation_id(operation_id)

        async def run(app: App) -> dict[str, Any]:
            method = {"pause": app.operations.pause, "resume": app.operations.resume,
                      "abort": app.operations.cancel}[action]
            return (await method(oid, actor=_actor())).to_dict()

        _print(_with_app(run))

    command.__doc__ = help_text
    ops_app.command(action)(command)


_state_command("pause", "Pause an operation after the batch in flight.")
_state_command("resume", "Resume a paused operation where it stopped.")
_state_command("abort", "Cancel an operation for good after the batch in flight (what was done stays done).")
