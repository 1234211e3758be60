"""Recovery and operations (docs/operations.md): `dataloader ops` - search jobs, top errors,
bulk requeue/cancel/delete/priority, process restarts and workflow cancel/restart/retry as tracked
operations with progress."""

from __future__ import annotations

import asyncio
import json
import uuid
from datetime import datetime
from typing import TYPE_CHECKING, Annotated, Any

import typer

from dataloader.cli.common import _print, _uuid_argument, _with_app
from dataloader.cli.processes import FromEventOpt, FromOpt, _restart_point
from dataloader.config import Settings

if TYPE_CHECKING:
    from dataloader.app import App

ops_app = typer.Typer(help="Recovery: search jobs, top errors, bulk requeue/cancel/delete/priority with progress.",
                      no_args_is_help=True)

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

    failed = f" failed={op.failed}" if op.failed else ""
    return escape(f"{op.kind} {str(op.id)[:8]} [{op.state}] changed={op.changed} skipped={op.skipped}{failed}")


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


WorkflowOpt = Annotated[str | None, typer.Option("--workflow", help="Only this workflow's runs")]
RunStatusOpt = Annotated[list[str] | None, typer.Option(
    "--status", help="queued, running, succeeded, failed, canceled or lost (the run's job's); repeatable")]
TopLevelOpt = Annotated[bool | None, typer.Option(
    "--top-level/--children", help="Only runs no gather started / only children (default: both)")]


def _run_filter(workflow: str | None, status: list[str] | None, created_from: str | None, created_to: str | None,
                top_level: bool | None) -> dict[str, Any]:
    """The options as a workflow operation's filter; the manager validates it (one rule, every face)."""
    values = {"workflow": workflow, "statuses": status or None, "created_from": _when("created-from", created_from),
              "created_to": _when("created-to", created_to), "top_level": top_level}
    return {k: v.isoformat() if isinstance(v, datetime) else v for k, v in values.items() if v is not None}


def _workflow_command(action: str, help_text: str) -> None:
    def command(
        workflow: WorkflowOpt = None, status: RunStatusOpt = None, created_from: TimeOpt = None,
        created_to: TimeOpt = None, top_level: TopLevelOpt = None,
        from_step: Annotated[str | None, typer.Option(
            "--from-step", help="restart: the step to run again from (default: the start)")] = None,
        dry_run: DryRunOpt = False, yes: YesOpt = False, watch: WatchOpt = True, batch_size: BatchOpt = None,
    ) -> None:
        if from_step is not None and action != "restart":
            raise typer.BadParameter("--from-step: only restart-workflows takes a step (retry finds where each "
                                     "run failed)")
        params = {"from_step": from_step} if action == "restart" and from_step is not None else None
        _bulk(f"workflow_{action}", _run_filter(workflow, status, created_from, created_to, top_level), params,
              dry_run, yes, watch, batch_size, what="workflow runs")

    command.__doc__ = help_text
    ops_app.command(f"{action}-workflows")(command)


_workflow_command("cancel", "Cancel every workflow run matching the filter, with the runs below each (a tracked "
                            "operation with a progress bar).")
_workflow_command("restart", "Restart every ended workflow run matching the filter from --from-step (e.g. after a "
                             "fixed deploy); runs not ended are skipped and counted.")
_workflow_command("retry", "Run every ended workflow run matching the filter again from where it failed (its "
                           "first failed step).")


def _operation_id(value: str) -> uuid.UUID:
    return _uuid_argument(value, "an operation id (a UUID)")


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
