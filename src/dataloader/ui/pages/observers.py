"""Observers and nodes (docs/observers.md): each observer's state, the node that runs it, its moves,
failures and last error; each node's state (live, superseded, dead, stopped), observers running
against its capacity, queues and last heartbeat. Live (topic `observers`): an observer moving after
its node died shows without a reload. Action: stop an observer."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from dataloader.ui import render
from dataloader.ui.actions import action_form, ask, back, confirmed
from dataloader.ui.render import Can
from dataloader.ui.topic import Topic

if TYPE_CHECKING:
    from dataloader.app import App

NAV = ("Observers", "/observers")
LIMIT = 500


async def state(app: App) -> dict[str, Any]:
    return {"observers": await app.observers.list(limit=LIMIT),
            "nodes": await app.observers.nodes(include_ended=True, limit=200)}


async def render_live(app: App, arg: str, root: str, can: Can) -> str:
    return render.fragment("observers_live.html", root=root, csrf="", can=can,
                           limit=LIMIT, **await state(app))


async def show(request: Request) -> Response:
    return render.page(request, "observers.html", limit=LIMIT, **await state(request.app.state.console.app()))


async def stop(request: Request) -> Response:
    """Destructive (it is not started again): asks first (ui/actions.py)."""
    form = await action_form(request)
    name = form.get("name", "")
    observers = request.app.state.console.app().observers
    if not confirmed(form):
        current = await observers.get(name)  # an unknown name is its error page, not a question
        return ask(request, form, question=f"Stop observer {name}?", button="Stop the observer",
                   consequence=f"The {current.kind} observer ({current.state.value}) is stopped by its node and "
                               "not started again on any node.", keep="/observers")
    observer = await observers.stop(name)
    said = (f"Observer {name} stopped." if observer.state.value == "deleted"
            else f"Observer {name} stopping: its node stops it; it is not started again.")
    return back(request, form, "/observers", said)


routes = [Route("/observers", show, methods=["GET"]), Route("/observers/stop", stop, methods=["POST"])]
TOPICS = {"observers": Topic(render_live)}
