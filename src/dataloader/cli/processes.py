"""Processes (docs/processes.md): `dataloader processes`."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Annotated, Any

import typer

from dataloader.cli.common import _exit, _print, _with_app

if TYPE_CHECKING:
    from dataloader.app import App

processes_app = typer.Typer(help="Processes: get, list, trace, repair, simple-repair, remove, restart, check.",
                            no_args_is_help=True)


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
