"""Bulk operations: the list (newest first, keyset paging) and an operation's page with its live
progress (topic `operation:<id>`), pause / resume / cancel, and its audit trail."""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from dataloader.ui import render
from dataloader.ui.actions import action_form, ask, back, confirmed
from dataloader.ui.pages.jobs import is_uuid
from dataloader.ui.render import Can
from dataloader.ui.topic import Topic

if TYPE_CHECKING:
    from dataloader.app import App

NAV = ("Operations", "/operations")
ACTOR = "console"


async def listing(request: Request) -> Response:
    app = request.app.state.console.app()
    operations, next_cursor = await app.operations.list(cursor=request.query_params.get("cursor") or None, limit=50)
    return render.page(request, "operations.html", operations=operations, next_cursor=next_cursor)


async def operation_state(app: App, operation_id: uuid.UUID) -> dict[str, Any]:
    operation = await app.operations.get(operation_id)
    percent = 100 if operation.total == 0 else min(100, round(100 * operation.done / operation.total))
    return {"op": operation, "percent": percent, "events": await app.operations.events(operation_id)}


async def render_live(app: App, arg: str, root: str, can: Can) -> str:
    return render.fragment("operation_live.html", root=root, csrf="", can=can,
                           **await operation_state(app, uuid.UUID(arg)))


async def show(request: Request) -> Response:
    app = request.app.state.console.app()
    return render.page(request, "operation.html", **await operation_state(app, request.path_params["operation_id"]))


SAID = {"pause": "paused: it stops after the batch in flight", "resume": "resumed from where it stopped",
        "cancel": "canceled: it ends after the batch in flight; what it did stays done"}


def _state_action(name: str) -> Any:
    async def act(request: Request) -> Response:
        form = await action_form(request)
        operation_id = request.path_params["operation_id"]
        operations = request.app.state.console.app().operations
        if name == "cancel" and not confirmed(form):  # for good: asks first (ui/actions.py)
            op = await operations.get(operation_id)
            return ask(request, form, question=f"Cancel operation {operation_id}?", button="Cancel the operation",
                       consequence=f"The {op.kind} operation ({op.done:,} of {op.total:,} jobs examined) ends "
                                   "for good after the batch in flight; what it did stays done, and it cannot "
                                   "be resumed.", keep=f"/operations/{operation_id}")
        await getattr(operations, name)(operation_id, actor=ACTOR)
        return back(request, form, f"/operations/{operation_id}", f"Operation {operation_id} {SAID[name]}.")
    act.__name__ = name
    return act


routes = [Route("/operations", listing, methods=["GET"]),
          Route("/operations/{operation_id:uuid}", show, methods=["GET"]),
          *(Route(f"/operations/{{operation_id:uuid}}/{name}", _state_action(name), methods=["POST"])
            for name in ("pause", "resume", "cancel"))]
TOPICS = {"operation": Topic(render_live, accepts=is_uuid)}
