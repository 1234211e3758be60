"""Workflows (docs/workflows.md): `dataloader workflows`."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Annotated, Any

import typer

from dataloader.cli.common import _print, _with_app
from dataloader.workflows.manager import DEFAULT_LIST_LIMIT

if TYPE_CHECKING:
    from dataloader.app import App

workflows_app = typer.Typer(help="Workflows: start, list, get, result, signal, cancel, restart.", no_args_is_help=True)


def _json_option(name: str, text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise typer.BadParameter(f"{name} is not JSON: {exc.msg}") from None


@workflows_app.command("start")
def workflows_start(
    workflow: str,
    input: Annotated[str, typer.Option("--input", help="The workflow's input, JSON")] = "null",
    idempotency_key: Annotated[str | None, typer.Option(help="The same key starts one run")] = None,
    deadline: Annotated[str | None, typer.Option(
        help="How long the whole run may take: seconds, or 90m, 12h, 7d; past it the run fails")] = None,
) -> None:
    """Start a run of a registered workflow (DL_PIPELINE_MODULES imports it); prints the run."""
    value = _json_option("--input", input)

    async def run(app: App) -> dict[str, Any]:
        run_id = await app.workflows.start(workflow, value, idempotency_key=idempotency_key, deadline=deadline)
        return (await app.workflows.get(run_id)).to_dict()

    _print(_with_app(run))


@workflows_app.command("list")
def workflows_list(
    workflow: Annotated[str | None, typer.Option(help="Only this workflow's runs")] = None,
    status: Annotated[str | None, typer.Option(help="Only runs whose job has this status")] = None,
    limit: Annotated[int, typer.Option(help="Runs per page, 1-500")] = DEFAULT_LIST_LIMIT,
    cursor: Annotated[str | None, typer.Option(help="next_cursor of the previous page")] = None,
) -> None:
    """Runs newest first, without their history; `next_cursor` gets the next page."""

    # the bounds are the manager's (app.workflows.list), checked there as for Python and HTTP
    async def run(app: App) -> dict[str, Any]:
        return (await app.workflows.list(workflow=workflow, status=status, limit=limit, cursor=cursor)).to_dict()

    _print(_with_app(run))


@workflows_app.command("get")
def workflows_get(run_id: str) -> None:
    """A run with its recorded history."""

    async def run(app: App) -> dict[str, Any]:
        return (await app.workflows.get(run_id)).to_dict()

    _print(_with_app(run))


@workflows_app.command("result")
def workflows_result(
    run_id: str,
    timeout: Annotated[float, typer.Option(min=0, max=3600, help="Seconds to wait for the run to end")] = 30,
) -> None:
    """Wait for a run's result (exit 1 if it failed, was canceled or lost, or outlasted the wait)."""

    async def run(app: App) -> dict[str, Any]:
        return {"run_id": run_id, "result": await app.workflows.result(run_id, timeout=timeout)}

    _print(_with_app(run))


@workflows_app.command("signal")
def workflows_signal(
    run_id: str,
    name: str,
    payload: Annotated[str, typer.Option(help="The signal's payload, JSON")] = "null",
) -> None:
    """Send signal NAME to a run: stored until a wait of the run takes it."""
    value = _json_option("--payload", payload)

    async def run(app: App) -> dict[str, Any]:
        await app.workflows.signal(run_id, name, value)
        return {"run_id": run_id, "signal": name}

    _print(_with_app(run))


@workflows_app.command("complete-token")
def workflows_complete_token(
    token: str,
    payload: Annotated[str, typer.Option(help="What the run's wait_for(token) returns, JSON")] = "null",
) -> None:
    """Complete a run's wait token (once); prints the run's id."""
    value = _json_option("--payload", payload)

    async def run(app: App) -> dict[str, Any]:
        return {"run_id": str(await app.workflows.complete_token(token, value)), "completed": True}

    _print(_with_app(run))


@workflows_app.command("cancel")
def workflows_cancel(run_id: str) -> None:
    """Cancel a run and every run below it that has not ended."""

    async def run(app: App) -> dict[str, Any]:
        return (await app.workflows.cancel(run_id)).to_dict()

    _print(_with_app(run))


@workflows_app.command("restart")
def workflows_restart(
    run_id: str,
    from_step: Annotated[str | None, typer.Option(help="The step to run again from (default: the start)")] = None,
) -> None:
    """Run a failed, canceled or lost run again from a step; the steps before it keep their results."""

    async def run(app: App) -> dict[str, Any]:
        return (await app.workflows.restart(run_id, from_step=from_step)).to_dict()

    _print(_with_app(run))
