"""A bulk action on the jobs filter: the dry-run count first (what the operation would examine,
nothing written), then the operation itself (docs/operations.md), whose live progress, pause,
resume, cancel and audit trail are on its page (pages/operations.py)."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from dataloader.exceptions import DataloaderError, ValidationFailed
from dataloader.model.operation import JOB_KINDS
from dataloader.model.principal import Action
from dataloader.ui import filters, render
from dataloader.ui.actions import action_form, ask, confirmed, require, to

NAV = None
TOPICS: dict = {}
STARTED_BY = "console"
WHAT = {"requeue": "put failed, canceled and lost jobs back in their queue (as Retry does)",
        "cancel": "cancel queued and running jobs",
        "delete": "delete finished jobs (and their journal)",
        "set_priority": "set the priority of queued jobs"}


def _params(kind: str, priority: str) -> dict[str, object]:
    if kind != "set_priority":
        return {}
    try:
        return {"priority": int(priority)}
    except ValueError:
        raise ValidationFailed("priority: a whole number from 0", [
            {"loc": ["priority"], "msg": "a whole number from 0", "type": "int_parsing"}]) from None


async def show(request: Request) -> Response:
    """GET: the filter, the kind chosen and, when asked (`count=1`), the dry-run count."""
    app = request.app.state.console.app()
    values = filters.form_values(request.query_params)
    kind = request.query_params.get("kind", "requeue")
    priority = request.query_params.get("priority", "")
    dry_run = problem = None
    if request.query_params.get("count"):
        try:
            dry_run = await app.operations.start(kind, filters.job_filter(values), params=_params(kind, priority),
                                                 dry_run=True)
        except DataloaderError as exc:
            problem = f"{exc.code}: {exc}"
    return render.page(request, "bulk.html", status=200 if problem is None else 422, values=values, kind=kind,
                       kinds=JOB_KINDS, what=WHAT, priority=priority, dry_run=dry_run, problem=problem,
                       query=filters.query_string(values), fields=_hidden_fields(values))


def _hidden_fields(values: dict) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    for name in filters.FIELDS:
        value = values.get(name)
        if isinstance(value, list):
            out.extend((name, v) for v in value)
        elif value:
            out.append((name, value))
    return out


async def start(request: Request) -> Response:
    """Destructive (many jobs at once): asks first, with the count of a fresh dry run, as
    `dataloader ops` asks "start it?"."""
    form = await action_form(request)
    app = request.app.state.console.app()
    values = filters.form_values(form)
    kind = form.get("kind", "")
    if kind == "delete":  # the route needs OPERATE; deleting jobs, as one at a time, DELETE too
        require(Action.DELETE)
    params = _params(kind, form.get("priority", ""))
    if not confirmed(form):
        dry_run = await app.operations.start(kind, filters.job_filter(values), params=params, dry_run=True)
        jobs = f"{dry_run.total:,} job{'' if dry_run.total == 1 else 's'}"
        return ask(request, form, question=f"Start {kind} on {jobs}?", button=f"Start {kind} on {jobs}",
                   consequence=f"The operation will {WHAT.get(kind, kind)}, for the jobs of the filter "
                               "(the count is now's; jobs no longer eligible when their batch comes are "
                               "skipped). It can be paused or canceled on its page; what it did stays done.",
                   keep=f"/bulk?{filters.query_string(values, kind=kind, count='1')}")
    operation = await app.operations.start(kind, filters.job_filter(values), params=params, started_by=STARTED_BY)
    return to(request, f"/operations/{operation.id}",
              f"Operation {operation.id} started: {kind} on {operation.total:,} "
              f"job{'' if operation.total == 1 else 's'}.")


routes = [Route("/bulk", show, methods=["GET"]), Route("/bulk", start, methods=["POST"])]
