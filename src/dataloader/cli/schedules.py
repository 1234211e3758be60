"""Periodic schedules (docs/patterns.md "Periodic schedules"): `dataloader schedules`."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

import typer

from dataloader.cli.common import _json_option, _print, _with_app

if TYPE_CHECKING:
    from dataloader.app import App

schedules_app = typer.Typer(help="Periodic schedules: list, create, pause, resume, delete, history.",
                            no_args_is_help=True)


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
