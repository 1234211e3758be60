"""Flow control (issue 21; docs/flow-control.md): `dataloader queues list|pause|resume`."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import typer

from dataloader.cli.common import _print, _with_app

if TYPE_CHECKING:
    from dataloader.app import App

queues_app = typer.Typer(help="Queues: list (paused, current use), pause, resume, depths.", no_args_is_help=True)


@queues_app.command("list")
def queues_list() -> None:
    """Every queue that is paused or has queued or running jobs, with its current use."""

    async def run(app: App) -> list[dict[str, Any]]:
        return [q.to_dict() for q in await app.queues()]

    _print(_with_app(run))


@queues_app.command("pause")
def queues_pause(queue: str) -> None:
    """Pause a queue on every node: running jobs finish, nothing new starts, enqueue still works."""
    from dataloader.flow.manager import check_queue_name

    check_queue_name(queue)  # the service's own check, before any connection (exit 2, nothing written)

    async def run(app: App) -> dict[str, Any]:
        return (await app.pause_queue(queue)).to_dict()

    _print(_with_app(run))


@queues_app.command("resume")
def queues_resume(queue: str) -> None:
    """Resume a paused queue; its workers on every node wake at once."""
    from dataloader.flow.manager import check_queue_name

    check_queue_name(queue)

    async def run(app: App) -> dict[str, Any]:
        return (await app.resume_queue(queue)).to_dict()

    _print(_with_app(run))


@queues_app.command("depths")
def queues_depths() -> None:
    """Each queue's depth now: due, delayed, running and held jobs, and the oldest due job's age
    (what the console's overview shows; GET /api/v1/stats/depths)."""

    async def run(app: App) -> list[dict[str, Any]]:
        return [d.to_dict() for d in await app.queue_depths()]

    _print(_with_app(run))
