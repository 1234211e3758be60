"""A bulk action on the workflow runs a filter finds (docs/operations.md, docs/workflows.md):
cancel them, restart them from a step, or retry them from where they failed. The dry run first
(the runs by status and the first few, nothing written), then, behind the console's confirmation
step, the tracked operation, whose live progress, pause, resume, cancel and audit trail are on its
page (pages/operations.py). The calls are `app.workflows.cancel_many / restart_many / retry_many`,
so the filter is refused here as in Python, HTTP and the CLI."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

from starlette.datastructures import ImmutableMultiDict, QueryParams
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from dataloader.exceptions import DataloaderError
from dataloader.model.operation import DryRun, Operation
from dataloader.ui import render
from dataloader.ui.actions import action_form, ask, confirmed, to
from dataloader.workflows.manager import RUN_STATUSES

NAV = None
TOPICS: dict = {}
STARTED_BY = "console"
ACTIONS = ("cancel", "restart", "retry")
WHAT = {"cancel": "cancel each run that has not ended, with every run below it (as Cancel on a run's page does)",
        "restart": "run each ended run again from the step named (from the start: none); the steps before keep "
                   "their results",
        "retry": "run each ended run again from where it failed (its first failed step)"}
FILTER_FIELDS = ("workflow", "status", "created_from", "created_to", "top_level")


def selection(values: QueryParams | ImmutableMultiDict[str, str]) -> dict[str, Any]:
    """The form's fields as a RunFilter's mapping (the manager checks it)."""
    f: dict[str, Any] = {}
    if values.get("workflow", "").strip():
        f["workflow"] = values["workflow"].strip()
    statuses = [s for s in values.getlist("status") if s]
    if statuses:
        f["statuses"] = statuses
    for name in ("created_from", "created_to"):
        if values.get(name, "").strip():
            f[name] = values[name].strip()
    if values.get("top_level") == "yes":
        f["top_level"] = True
    return f


def _fields(values: QueryParams | ImmutableMultiDict[str, str]) -> list[tuple[str, str]]:
    """The filter's fields as hidden inputs (or a query), repeated ones repeated."""
    return [(name, value) for name in FILTER_FIELDS for value in values.getlist(name) if value]


async def _call(request: Request, action: str, f: dict[str, Any], from_step: str | None, **options: Any
                ) -> Operation | DryRun:
    workflows = request.app.state.console.app().workflows
    if action == "restart":
        return await workflows.restart_many(f, from_step, **options)
    if action == "retry":
        return await workflows.retry_many(f, **options)
    return await workflows.cancel_many(f, **options)


def _action(values: QueryParams | ImmutableMultiDict[str, str]) -> str:
    action = values.get("action", "cancel")
    return action if action in ACTIONS else "cancel"


async def show(request: Request) -> Response:
    """GET: the filter, the action chosen and, when asked (`count=1`), the dry run."""
    query = request.query_params
    action = _action(query)
    from_step = query.get("from_step", "") or None
    dry_run = problem = None
    if query.get("count"):
        try:
            dry_run = await _call(request, action, selection(query), from_step, dry_run=True)
        except DataloaderError as exc:
            problem = f"{exc.code}: {exc}"
    fields = _fields(query)
    return render.page(request, "workflow_bulk.html", status=200 if problem is None else 422, action=action,
                       actions=ACTIONS, what=WHAT, from_step=from_step or "", dry_run=dry_run, problem=problem,
                       fields=fields, statuses=RUN_STATUSES, chosen=set(query.getlist("status")),
                       values={name: query.get(name, "") for name in FILTER_FIELDS},
                       back_query=urlencode({"workflow": query.get("workflow", ""),
                                             "status": query.get("status", "")}))


async def start(request: Request) -> Response:
    """Destructive (many runs at once): asks first, with the count of a fresh dry run, as
    `dataloader ops` asks "start it?"; read-only mode refuses it (action_form)."""
    form = await action_form(request)
    action = _action(form)
    from_step = form.get("from_step", "") or None
    f = selection(form)
    if not confirmed(form):
        dry_run = await _call(request, action, f, from_step, dry_run=True)
        runs = f"{dry_run.total:,} workflow run{'' if dry_run.total == 1 else 's'}"
        where = f" from step {from_step!r}" if action == "restart" and from_step else ""
        statuses = ", ".join(f"{n:,} {s}" for s, n in sorted((dry_run.by_status or {}).items()))
        return ask(request, form, question=f"{action.capitalize()} {runs}{where}?",
                   button=f"{action.capitalize()} {runs}",
                   consequence=f"The operation will {WHAT[action]}, for the runs of the filter "
                               f"({statuses or 'none now'}; the count is now's: a run no longer eligible when its "
                               "batch comes is skipped, one whose restart is refused is counted failed). It can be "
                               "paused or canceled on its page; what it did stays done.",
                   keep="/workflows/bulk?" + urlencode([*_fields(form), ("action", action),
                                                        ("from_step", from_step or ""), ("count", "1")]))
    operation = await _call(request, action, f, from_step, started_by=STARTED_BY)
    return to(request, f"/operations/{operation.id}",
              f"Operation {operation.id} started: {operation.kind} on {operation.total:,} "
              f"workflow run{'' if operation.total == 1 else 's'}.")


# Before the workflows page's: its /workflows/{run_id} takes any text.
routes = [Route("/workflows/bulk", show, methods=["GET"]), Route("/workflows/bulk", start, methods=["POST"])]
