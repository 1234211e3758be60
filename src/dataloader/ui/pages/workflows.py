"""Workflows (docs/workflows.md): the runs newest first, filtered by workflow and status (keyset
paging: `app.workflows.list`), and a run's page: its state and its recorded history as a timeline
(a gather's children linked to their own pages), with the actions cancel, send a signal and
restart from a step — each the same `app.workflows` call Python, HTTP and the CLI make, so each
refuses alike (an ended run, an unknown step: the App's error as a page). The run's page is live
(topic `workflow:<run id>`): it moves on as the run does, without a reload.

All three actions ask first (ui/actions.py): a cancel ends the run and every run below it, a
restart removes the history from its step on, and a signal is taken by a wait and cannot be taken
back — each changes what the run does next for good."""

from __future__ import annotations

import json
import uuid
from typing import TYPE_CHECKING, Any
from urllib.parse import urlencode

from starlette.datastructures import ImmutableMultiDict
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from dataloader.exceptions import DataloaderError, ValidationFailed, WorkflowNotFound
from dataloader.model.workflow import Recorded, WorkflowRun
from dataloader.ui import render
from dataloader.ui.actions import action_form, ask, back, confirmed
from dataloader.ui.pages.jobs import is_uuid
from dataloader.ui.render import Can
from dataloader.ui.topic import Topic
from dataloader.workflows.manager import DEFAULT_LIST_LIMIT, RUN_STATUSES

if TYPE_CHECKING:
    from dataloader.app import App

NAV = ("Workflows", "/workflows")
PAGE_SIZE = DEFAULT_LIST_LIMIT
# What the timeline shows of a recorded result or error: enough to read, never a page of JSON.
SHOWN_CHARS = 500
# Only a run that ended this way can be restarted (WorkflowManager.restart): the form is offered then.
RESTARTABLE = ("failed", "canceled", "lost")


def run_path(run_id: uuid.UUID | str) -> str:
    return f"/workflows/{run_id}"


async def listing(request: Request) -> Response:
    app = request.app.state.console.app()
    query = request.query_params
    workflow = query.get("workflow", "").strip()
    status = query.get("status", "")
    page = problem = None
    try:
        page = await app.workflows.list(workflow=workflow or None, status=status or None,
                                        cursor=query.get("cursor") or None, limit=PAGE_SIZE)
    except DataloaderError as exc:  # a filter the manager refuses: said on the page, with the form
        problem = f"{exc.code}: {exc}"
    next_query = urlencode({"workflow": workflow, "status": status, "cursor": page.next_cursor}) \
        if page and page.next_cursor else ""
    return render.page(request, "workflows.html", status=200 if problem is None else 422, workflow=workflow,
                       run_status=status, statuses=RUN_STATUSES, registered=app.workflows.registry.names(),
                       runs=page.runs if page else [], next_query=next_query, problem=problem,
                       path_of=run_path, bulk_query=urlencode({k: v for k, v in (("workflow", workflow),
                                                                              ("status", status)) if v}))


def gather_children(step: Recorded) -> list[dict[str, Any]]:
    """The children of a gather, in order: a pending gather records their ids, a done one how each
    ended (`{run_id, workflow, status, …}`)."""
    children = []
    for item in step.result if isinstance(step.result, list) else []:
        if isinstance(item, str):
            children.append({"run_id": item, "workflow": None, "status": None})
        elif isinstance(item, dict) and isinstance(item.get("run_id"), str):
            children.append({"run_id": item["run_id"], "workflow": item.get("workflow"),
                             "status": item.get("status")})
    return children


def shown(value: str | None) -> str:
    """A result's or error's text cut to SHOWN_CHARS (the template escapes it)."""
    if value is None:
        return ""
    return value if len(value) <= SHOWN_CHARS else value[:SHOWN_CHARS] + "…"


def restart_points(run: WorkflowRun) -> list[str]:
    """The recorded steps a restart may start from, each name once (the manager takes its first
    position), in the order they were recorded."""
    names: list[str] = []
    for step in run.steps:
        if step.kind == "step" and step.name not in names:
            names.append(step.name)
    return names


async def run_of(request: Request) -> WorkflowRun:
    """The run the path names; a path that names none (not a UUID, or no such run) is a 404 page."""
    given = request.path_params["run_id"]  # a UUID already on the actions' routes, text on the page's
    try:
        run_id = given if isinstance(given, uuid.UUID) else uuid.UUID(given)
    except ValueError:
        raise WorkflowNotFound(f"no workflow run {given[:100]!r}: a run's id is a UUID") from None
    return await request.app.state.console.app().workflows.get(run_id)


def run_context(run: WorkflowRun) -> dict[str, Any]:
    """What the run's page and its live fragment show of it (one template: workflow_live.html)."""
    return {"run": run, "shown": shown, "children_of": gather_children, "restart_points": restart_points(run),
            "can_restart": run.status in RESTARTABLE, "masked_json": render.masked_json}


async def show(request: Request) -> Response:
    run = await run_of(request)
    return render.page(request, "workflow.html", **run_context(run))


async def render_live(app: App, arg: str, root: str, can: Can) -> str:
    """The run's state, actions and timeline, as the page shows them: rendered once per round of the
    node's live poll for every browser on the page (ui/live.py), so a step recorded, a sleep, a
    wait, a child's end or the run's end appears without a reload. Forms in it get their CSRF token
    from the page (static/console.js); what a user typed in the signal form or chose in the restart
    form is kept across a swap (hx-preserve), and every focusable element has an id, so the focus
    stays where it was."""
    try:
        run = await app.workflows.get(uuid.UUID(arg))
    except WorkflowNotFound:
        # the topic's argument is a UUID (accepts): nothing to escape
        return f'<p class="note" id="run-gone">Workflow run {uuid.UUID(arg)} no longer exists (pruned).</p>'
    return render.fragment("workflow_live.html", root=root, csrf="", can=can,
                           **run_context(run))


def _payload(form: ImmutableMultiDict[str, str]) -> Any:
    """The signal's payload from the form's JSON text (empty: none)."""
    text = form.get("payload", "")
    if not text.strip():
        return None
    try:
        return json.loads(text)
    except ValueError:
        raise ValidationFailed("payload: must be JSON", [{"loc": ["payload"], "msg": "must be JSON",
                                                          "type": "json_invalid"}]) from None


async def cancel(request: Request) -> Response:
    form = await action_form(request)
    run = await run_of(request)
    workflows = request.app.state.console.app().workflows
    if not confirmed(form) and not run.finished:  # an ended run: the manager's refusal says so at once
        return ask(request, form, question=f"Cancel workflow run {run.run_id}?", button="Cancel the run",
                   consequence=f"The {run.workflow} run ({run.status}) and every run below it that has not "
                               "ended are canceled: a sleeping, waiting or joining run at once, a running one "
                               "at its next await. Restart runs it again from a step.",
                   keep=run_path(run.run_id))
    canceled = await workflows.cancel(run.run_id)
    return back(request, form, run_path(run.run_id), f"Workflow run {run.run_id} {canceled.status}.")


async def signal(request: Request) -> Response:
    form = await action_form(request)
    run = await run_of(request)
    name = form.get("name", "").strip()
    payload = _payload(form)  # bad JSON is refused before anything is asked or sent
    if not confirmed(form) and not run.finished:
        return ask(request, form, question=f"Send signal {name!r} to workflow run {run.run_id}?",
                   button="Send the signal",
                   consequence=f"The {run.workflow} run ({run.status}) keeps the signal until a wait for "
                               f"{name!r} takes it, now or later, with this payload: "
                               f"{json.dumps(payload, ensure_ascii=False)[:SHOWN_CHARS]}. "
                               "A signal taken by a wait cannot be taken back.",
                   keep=run_path(run.run_id))
    await request.app.state.console.app().workflows.signal(run.run_id, name, payload)
    return back(request, form, run_path(run.run_id), f"Signal {name!r} sent to workflow run {run.run_id}.")


async def restart(request: Request) -> Response:
    form = await action_form(request)
    run = await run_of(request)
    from_step = form.get("from_step", "") or None  # empty: from the start
    if not confirmed(form) and run.status in RESTARTABLE:
        where = f"step {from_step!r}" if from_step else "the start"
        return ask(request, form, question=f"Restart workflow run {run.run_id} from {where}?",
                   button="Restart the run",
                   consequence=f"The {run.workflow} run ({run.status}) loses its recorded history from {where} "
                               "on (the signals its waits took there are freed for the replay) and runs again "
                               "from there; the steps before keep their results and do not run again. A gather "
                               "there starts new children; the old ones that have not ended are canceled.",
                   keep=run_path(run.run_id))
    restarted = await request.app.state.console.app().workflows.restart(run.run_id, from_step=from_step)
    return back(request, form, run_path(run.run_id),
                f"Workflow run {run.run_id} restarted from {repr(from_step) if from_step else 'the start'}: "
                f"it is {restarted.status}.")


# The show route takes any text so that a path naming no run is the 404 page, not a bare 404.
TOPICS = {"workflow": Topic(render_live, accepts=is_uuid)}
routes = [Route("/workflows", listing, methods=["GET"]), Route("/workflows/{run_id}", show, methods=["GET"]),
          Route("/workflows/{run_id:uuid}/cancel", cancel, methods=["POST"]),
          Route("/workflows/{run_id:uuid}/signal", signal, methods=["POST"]),
          Route("/workflows/{run_id:uuid}/restart", restart, methods=["POST"])]
