"""Observers and the node registry (docs/observers.md): `dataloader observers` and
`dataloader nodes` (a command of the root, registered in cli/__init__.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

import typer

from dataloader.cli.common import _exit, _json_option, _print, _with_app

if TYPE_CHECKING:
    from dataloader.app import App

observers_app = typer.Typer(help="Observers (never-ending work spread over the nodes): list, get, create, stop.",
                            no_args_is_help=True)


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


def nodes_command(
    all_incarnations: Annotated[bool, typer.Option("--all", help="Also dead and stopped incarnations")] = False,
) -> None:
    """The node registry: each service instance (incarnation), its heartbeat, capacity and load."""

    async def run(app: App) -> list[dict[str, Any]]:
        return [n.to_dict() for n in await app.observers.nodes(include_ended=all_incarnations)]

    _print(_with_app(run))
