"""Processes (docs/processes.md): every namespace with its processes counted by status, and per
namespace a list by id with a status filter (keyset paging)
and a jump to an id; a process's page with its status (live, topic `process:<ns>:<id>`), aux state,
timers, the task running or waiting, its history paged newest first, and its trace; actions repair
(the processor's repair task, with optional args), simple repair and restart from a step."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, urlencode

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Route

from dataloader.exceptions import DataloaderError, ValidationFailed
from dataloader.model.process import HistoryRange, ProcessStatus
from dataloader.ui import render
from dataloader.ui.actions import action_form, back
from dataloader.ui.render import Can
from dataloader.ui.topic import Topic

if TYPE_CHECKING:
    from dataloader.app import App

NAV = ("Processes", "/processes")
PAGE_SIZE = 50
HISTORY_PAGE = 50
REPAIR_WAIT_SEC = 10.0
STATUSES = [s.value for s in ProcessStatus]
ACTIVE_TASK_STATES = ("queued", "running", "waiting")


def process_path(ns: str, process_id: str) -> str:
    return f"/processes/{quote(ns, safe='')}/{quote(process_id, safe='')}"


async def listing(request: Request) -> Response:
    app = request.app.state.console.app()
    query = request.query_params
    ns = query.get("ns", "")
    status = query.get("status", "")
    wanted_id = query.get("id", "").strip()
    root = request.scope.get("root_path", "")
    if ns and wanted_id:
        return RedirectResponse(root + process_path(ns, wanted_id), status_code=303)
    page = problem = None
    if ns:
        try:
            page = await app.processes.list(ns, status=status or None, cursor=query.get("cursor") or None,
                                            limit=PAGE_SIZE)
        except DataloaderError as exc:
            problem = f"{exc.code}: {exc}"
    next_query = urlencode({"ns": ns, "status": status, "cursor": page.next_cursor}) if page and page.next_cursor \
        else ""
    counts = await app.processes.counts()
    registered = app.processes.processors.names()
    for name in registered:  # a namespace this node serves, with no process yet, is listed too
        counts.setdefault(name, dict.fromkeys(STATUSES, 0))
    return render.page(request, "processes.html", status=200 if problem is None else 422, ns=ns,
                       process_status=status, statuses=STATUSES, namespaces=registered,
                       counts=dict(sorted(counts.items())),
                       processes=page.processes if page else [], next_query=next_query, problem=problem,
                       path_of=process_path)


def running_task(trace: list[Any]) -> Any:
    return next((entry.task for entry in reversed(trace)
                 if entry.task is not None and entry.task.status in ACTIVE_TASK_STATES), None)


async def process_state(app: App, ns: str, process_id: str) -> dict[str, Any]:
    process = await app.processes.get(ns, process_id, HistoryRange(limit=1, direction="backward"))
    return {"process": process, "can_repair": process.status == ProcessStatus.error}


async def render_live(app: App, arg: str, root: str, can: Can) -> str:
    ns, _, process_id = arg.partition(":")
    return render.fragment("process_live.html", root=root, csrf="", can=can,
                           path=root + process_path(ns, process_id), **await process_state(app, ns, process_id))


def accepts(arg: str) -> bool:
    ns, sep, process_id = arg.partition(":")
    return bool(ns and sep and process_id) and len(arg) <= 500


async def show(request: Request) -> Response:
    app = request.app.state.console.app()
    ns, process_id = request.path_params["ns"], request.path_params["process_id"]
    try:
        before = int(request.query_params.get("before") or 0)
    except ValueError:
        before = 0
    state = await process_state(app, ns, process_id)
    page = await app.processes.get(ns, process_id, HistoryRange(offset=max(before, 0), limit=HISTORY_PAGE,
                                                                  direction="backward"))
    trace = await app.processes.trace(ns, process_id)
    history = page.history
    older = history[-1].event_id if history and history[-1].event_id > 1 else None
    root = request.scope.get("root_path", "")
    return render.page(request, "process.html", **state, history=history, older=older, trace=trace,
                       running=running_task(trace), path=root + process_path(ns, process_id),
                       topic=f"process:{ns}:{process_id}")


def _args(text: str) -> Any:
    if not text.strip():
        return None
    try:
        return json.loads(text)
    except ValueError:
        raise ValidationFailed("args: must be JSON", [{"loc": ["args"], "msg": "must be JSON",
                                                       "type": "json_invalid"}]) from None


async def repair(request: Request) -> Response:
    form = await action_form(request)
    ns, process_id = request.path_params["ns"], request.path_params["process_id"]
    await request.app.state.console.app().processes.repair(ns, process_id, _args(form.get("args", "")),
                                                           timeout=REPAIR_WAIT_SEC)
    return back(request, form, process_path(ns, process_id),
                f"Process {process_id} of {ns} repaired: its repair task succeeded and it runs again.")


async def simple_repair(request: Request) -> Response:
    form = await action_form(request)
    ns, process_id = request.path_params["ns"], request.path_params["process_id"]
    process = await request.app.state.console.app().processes.simple_repair(ns, process_id)
    timer = " and its suspended timer re-armed" if process.timer is not None else ""
    return back(request, form, process_path(ns, process_id),
                f"Process {process_id} of {ns}: error cleared{timer}; it is {process.status.value} again.")


async def restart(request: Request) -> Response:
    form = await action_form(request)
    ns, process_id = request.path_params["ns"], request.path_params["process_id"]
    point = form.get("from", "error")
    processes = request.app.state.console.app().processes
    if point.isdigit():
        result = await processes.restart(ns, process_id, event_id=int(point))
    else:
        result = await processes.restart(ns, process_id, point)
    return back(request, form, process_path(ns, process_id),
                f"Process {process_id} of {ns} restarted from its {result.task_type} task: {result.removed_events} "
                f"event{'' if result.removed_events == 1 else 's'} undone, {len(result.queued)} "
                f"task{'' if len(result.queued) == 1 else 's'} queued to run again.")


# `path`: an id may hold a slash (ids are any text); the actions end in a fixed word after it.
BASE = "/processes/{ns}/{process_id:path}"
routes = [Route("/processes", listing, methods=["GET"]), Route(BASE, show, methods=["GET"]),
          Route(BASE + "/repair", repair, methods=["POST"]),
          Route(BASE + "/simple-repair", simple_repair, methods=["POST"]),
          Route(BASE + "/restart", restart, methods=["POST"])]
TOPICS = {"process": Topic(render_live, accepts=accepts)}
