"""Flow control (docs/flow-control.md): `dataloader queues list|pause|resume|set`."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

import typer

from dataloader.cli.common import _print, _with_app

if TYPE_CHECKING:
    from dataloader.app import App

queues_app = typer.Typer(help="Queues: list (paused, limits, fair share, paused tasks, current use), pause, "
                              "resume (a queue or one task), set limits and fair share, scaling, depths.",
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


_NONE = "; none clears it"


@queues_app.command("set")
def queues_set(
    queue: str,
    concurrency: Annotated[str | None, typer.Option(help="Jobs of the queue running at once on all nodes" + _NONE)
                           ] = None,
    partition_concurrency: Annotated[str | None, typer.Option(
        help="Jobs running at once per partition_key, all nodes" + _NONE)] = None,
    rate: Annotated[str | None, typer.Option(help='Starts per period, all nodes: "10/1s", "5/500ms", "100/1m"'
                                             + _NONE)] = None,
    partition_rate: Annotated[str | None, typer.Option(help='Starts per period per partition_key: "10/1s"'
                                                       + _NONE)] = None,
    fair_share: Annotated[bool | None, typer.Option(
        "--fair-share/--no-fair-share", help="Claims go round-robin (or by weight) across partition keys")] = None,
    fair_weights: Annotated[str | None, typer.Option(
        help='partition_key -> weight under fair share, as JSON: \'{"big": 3}\' (a key not named weighs 1)'
             + _NONE)] = None,
    task: Annotated[str | None, typer.Option(
        "--task", help="Set this task's own limits in the queue (--concurrency, --rate only): its jobs running "
                       "at once and its starts per period, all nodes")] = None,
) -> None:
    """Change a queue's limits and fair share on every node (a runtime setting: it wins over
    declared ones), or with --task one task's limits in the queue. Options not given are kept."""
    from dataloader.model.flow import changes_from_text, task_changes_from_text

    _check(queue, task)  # every check before any connection (exit 2, nothing written)
    if task is not None:
        changes = task_changes_from_text(concurrency=concurrency, rate=rate,
                                         partition_concurrency=partition_concurrency, partition_rate=partition_rate,
                                         fair_share=fair_share, fair_weights=fair_weights)
    else:
        changes = changes_from_text(concurrency=concurrency, partition_concurrency=partition_concurrency, rate=rate,
                                    partition_rate=partition_rate, fair_share=fair_share, fair_weights=fair_weights)

    async def run(app: App) -> dict[str, Any]:
        if task is not None:
            return (await app.configure_task(queue, task, **changes)).to_dict()
        return (await app.configure_queue(queue, **changes)).to_dict()

    _print(_with_app(run))


@queues_app.command("scaling")
def queues_scaling(queue: str, target_sec: Annotated[float, typer.Option(
        help="Drain the backlog within this many seconds")] = 60.0) -> None:
    """The autoscaling signal of a queue: the job slots it wants on all nodes now, and why."""
    from dataloader.flow.manager import check_queue_name

    check_queue_name(queue)

    async def run(app: App) -> dict[str, Any]:
        return (await app.queue_scaling(queue, target_sec=target_sec)).to_dict()

    _print(_with_app(run))


@queues_app.command("depths")
def queues_depths() -> None:
    """Each queue's depth now: due, delayed, running and held jobs, and the oldest due job's age
    (what the console's overview shows; GET /api/v1/stats/depths)."""

    async def run(app: App) -> list[dict[str, Any]]:
        return [d.to_dict() for d in await app.queue_depths()]

    _print(_with_app(run))
