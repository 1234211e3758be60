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
import uuid
from datetime import datetime
from typing import TYPE_CHECKING, Annotated, Any

import typer
from pydantic import ValidationError

from dataloader.config import Settings, load_settings
from dataloader.exceptions import ConfigError, DataloaderError
from dataloader.heap import freeze_startup_objects

if TYPE_CHECKING:
    from dataloader.app import App

app = typer.Typer(
    no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False,
    help="Durable background jobs on PostgreSQL.",
)
db_app = typer.Typer(help="Database schema.", no_args_is_help=True)
jobs_app = typer.Typer(help="Enqueue, inspect, cancel and retry jobs.", no_args_is_help=True)
app.add_typer(db_app, name="db")
app.add_typer(jobs_app, name="jobs")

log = logging.getLogger("dataloader")


def _settings() -> Settings:
    """Settings, logging, and the user's pipelines, all checked before anything is started: any
    problem is one line `dataloader: configuration error: ...` and exit code 2."""
    from dataloader.logger import setup_logging
    from dataloader.workers.pipelines.registry import load_pipeline_modules

    try:
        settings = load_settings()
        setup_logging(settings.log_level, settings.log_format)
        _working_dir_on_sys_path()
        load_pipeline_modules(settings.pipeline_module_names)
    except ConfigError as exc:
        typer.echo(f"dataloader: configuration error: {exc}", err=True)
        raise typer.Exit(2) from None
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
    typer.echo(json.dumps(data, indent=2, default=str))


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
    with asyncio.Runner(loop_factory=new_event_loop) as runner:
        return runner.run(main)


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
    try:
        await app.open(migrate_schema=True)
    except Exception as exc:
        log.error("start-up failed: %s", exc)
        return 1
    stop = _signal_future()
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
    except Exception as exc:
        _fail(f"migration failed: {exc}")
    _print({"from_revision": before, "to_revision": after})


def _with_app(fn: Any) -> Any:
    settings = _settings()

    async def run() -> Any:
        app = _cli_app(settings)
        await app.open(migrate_schema=True)
        try:
            return await fn(app)
        finally:
            await app.close()

    try:
        return _run(run())
    except DataloaderError as exc:
        _fail(f"{exc.code}: {exc}")


def _job_id(value: str) -> uuid.UUID:
    try:
        return uuid.UUID(value)
    except ValueError:
        raise typer.BadParameter(f"{value!r} is not a UUID") from None


@jobs_app.command("trigger")
def jobs_trigger(
    task: Annotated[str, typer.Option(help="Pipeline name, e.g. dl.sleep")],
    lock_key: Annotated[str, typer.Option(help="Jobs with the same lock_key never run at once")],
    queue: Annotated[str, typer.Option()] = "default",
    args: Annotated[str, typer.Option(help="JSON object")] = "{}",
    idempotency_key: Annotated[str | None, typer.Option()] = None,
    partition_key: Annotated[str, typer.Option()] = "",
    priority: Annotated[int, typer.Option(help="Lower runs first")] = 100,
    available_at: Annotated[str | None, typer.Option(help="RFC 3339 time with timezone")] = None,
    max_attempts: Annotated[int | None, typer.Option()] = None,
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
    from dataloader.services.jobs import JobRequest, status_view

    try:
        parsed_args = json.loads(args)
        req = JobRequest(
            queue=queue, task=task, lock_key=lock_key, args=parsed_args, idempotency_key=idempotency_key,
            partition_key=partition_key, priority=priority,
            available_at=datetime.fromisoformat(available_at) if available_at else None,
            max_attempts=max_attempts, timeout_sec=timeout_sec,
            then=[_stage(item) for item in then or ()], restartable=restartable,
            unique_for_sec=unique_for_sec, unique_key=unique_key,
        )
    except json.JSONDecodeError as exc:
        raise typer.BadParameter(f"--args or --then is not JSON: {exc.msg}") from None
    except (ValidationError, ValueError) as exc:
        raise typer.BadParameter(str(exc).splitlines()[0] if not isinstance(exc, ValidationError)
                                 else "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}"
                                                for e in exc.errors())) from None

    async def run(app: App) -> dict[str, Any]:
        result = await app.jobs.trigger(req, producer="cli")
        return {**status_view(result.job), "created": result.created}

    _print(_with_app(run))


def _stage(text: str) -> Any:
    """--then: a task name, or a JSON object with Stage's fields."""
    return json.loads(text) if text.lstrip().startswith("{") else {"task": text}


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
    from dataloader.services.jobs import status_view

    jid = _job_id(job_id)

    async def run(app: App) -> dict[str, Any]:
        return status_view(await app.get(jid))

    _print(_with_app(run))


@jobs_app.command("cancel")
def jobs_cancel(job_id: str) -> None:
    """Cancel a job: at once if queued, at its next chunk if running."""
    from dataloader.services.jobs import status_view

    jid = _job_id(job_id)

    async def run(app: App) -> dict[str, Any]:
        return status_view(await app.cancel(jid))

    _print(_with_app(run))


@jobs_app.command("retry")
def jobs_retry(job_id: str) -> None:
    """Put a failed, canceled or lost job back to the queue, with a fresh attempt budget."""
    from dataloader.services.jobs import status_view

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
    from dataloader.services.retention import FINISHED_STATUSES

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
    from dataloader.exceptions import InvalidScheduleRequest
    from dataloader.services.schedules import ScheduleService

    try:
        spec = ScheduleService.spec(name=name, task=task, cron=cron, every_sec=every, tz=tz, queue=queue,
                                    args=json.loads(args), missed=missed, catch_up_limit=catch_up_limit,
                                    lock_key=lock_key)
    except json.JSONDecodeError as exc:
        raise typer.BadParameter(f"--args is not JSON: {exc.msg}") from None
    except InvalidScheduleRequest as exc:
        raise typer.BadParameter(str(exc)) from None

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
    from dataloader.services.search import parse_filter

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
    from dataloader.exceptions import InvalidObserverRequest
    from dataloader.services.observers import ObserverService

    try:
        spec = ObserverService.spec(name=name, kind=kind, args=json.loads(args), max_restarts=max_restarts)
    except json.JSONDecodeError as exc:
        raise typer.BadParameter(f"--args is not JSON: {exc.msg}") from None
    except InvalidObserverRequest as exc:
        raise typer.BadParameter(str(exc)) from None

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
        return await app.processes.trace(ns, process_id)

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


async def _watch(app: App, operation_id: uuid.UUID, interval: float = 0.5) -> dict[str, Any]:
    """A progress bar (done / total) until the operation ends; returns it."""
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    console = Console(stderr=True)
    op = await app.operations.get(operation_id)
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=console, transient=False) as bar:
        task = bar.add_task(f"{op.kind} {str(op.id)[:8]}", total=max(op.total, 1))
        while True:
            op = await app.operations.get(operation_id)
            bar.update(task, completed=op.done, total=max(op.total, op.done, 1),
                       description=f"{op.kind} {str(op.id)[:8]} [{op.state}] changed={op.changed}")
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
