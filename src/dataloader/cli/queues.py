"""Flow control (issue 21; docs/flow-control.md): `dataloader queues list|pause|resume|set`."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

import typer

from dataloader.cli.common import _print, _with_app

if TYPE_CHECKING:
    from dataloader.app import App

queues_app = typer.Typer(help="Queues: list (paused, limits, current use), pause, resume, set limits.",
                         no_args_is_help=True)


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
) -> None:
    """Change a queue's limits on every node (a runtime setting: it wins over declared limits).
    Options not given are kept."""
    from dataloader.flow.manager import check_queue_name
    from dataloader.model.flow import check_changes, parse_limit_text, parse_rate_text

    check_queue_name(queue)  # every check before any connection (exit 2, nothing written)
    changes: dict[str, Any] = {}
    if concurrency is not None:
        changes["concurrency"] = parse_limit_text("concurrency", concurrency)
    if partition_concurrency is not None:
        changes["partition_concurrency"] = parse_limit_text("partition_concurrency", partition_concurrency)
    if rate is not None:
        changes["rate_limit"], changes["rate_period_sec"] = parse_rate_text("rate", rate)
    if partition_rate is not None:
        changes["partition_rate_limit"], changes["partition_rate_period_sec"] = parse_rate_text(
            "partition_rate", partition_rate)
    check_changes(changes)

    async def run(app: App) -> dict[str, Any]:
        return (await app.configure_queue(queue, **changes)).to_dict()

    _print(_with_app(run))
