"""Flow control (issue 21; docs/flow-control.md): `dataloader queues list|pause|resume`."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import typer

from dataloader.cli.common import _print, _with_app

if TYPE_CHECKING:
    from dataloader.app import App

queues_app = typer.Typer(help="Queues: list (paused, paused tasks, fair share, current use), pause, resume.",
                         no_args_is_help=True)


@queues_app.command("list")
def queues_list() -> None:
    """Every queue that is paused or has queued or running jobs, with its current use."""

    async def run(app: App) -> list[dict[str, Any]]:
        return [q.to_dict() for q in await app.queues()]

    _print(_with_app(run))


TASK_OPTION = typer.Option(None, "--task", help="Only this task of the queue; its other tasks are not affected")


def _check(queue: str, task: str | None) -> None:
    """The service's own checks, before any connection (exit 2, nothing written)."""
    from dataloader.flow.manager import check_queue_name, check_task_name

    check_queue_name(queue)
    if task is not None:
        check_task_name(task)


@queues_app.command("pause")
def queues_pause(queue: str, task: str | None = TASK_OPTION) -> None:
    """Pause a queue (or one task of it) on every node: running jobs finish, nothing new starts,
    enqueue still works."""
    _check(queue, task)

    async def run(app: App) -> dict[str, Any]:
        return (await app.pause_queue(queue, task=task)).to_dict()

    _print(_with_app(run))


@queues_app.command("resume")
def queues_resume(queue: str, task: str | None = TASK_OPTION) -> None:
    """Resume a paused queue (or one task of it); its workers on every node wake at once."""
    _check(queue, task)

    async def run(app: App) -> dict[str, Any]:
        return (await app.resume_queue(queue, task=task)).to_dict()

    _print(_with_app(run))
