"""Schedules (docs/patterns.md "Schedules"): every schedule with its next ticks and last run, a
schedule's page with its recent runs; actions pause, resume and trigger now."""

from __future__ import annotations

from urllib.parse import quote

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Route

from dataloader.ui import render
from dataloader.ui.actions import action_form, back

NAV = ("Schedules", "/schedules")
TOPICS: dict = {}
UPCOMING = 3
RUNS = 20


def schedule_path(name: str) -> str:
    return f"/schedules/{quote(name, safe='')}"


async def listing(request: Request) -> Response:
    app = request.app.state.console.app()
    schedules = await app.schedules.list()
    rows = [{"schedule": s, "upcoming": app.schedules.upcoming(s, UPCOMING)} for s in schedules]
    return render.page(request, "schedules.html", rows=rows, path_of=schedule_path)


async def show(request: Request) -> Response:
    app = request.app.state.console.app()
    name = request.path_params["name"]
    schedule = await app.schedules.get(name)
    runs = await app.schedules.history(name, limit=RUNS)
    return render.page(request, "schedule.html", schedule=schedule, runs=runs,
                       upcoming=app.schedules.upcoming(schedule, 5), path=schedule_path(name))


async def pause(request: Request) -> Response:
    form = await action_form(request)
    await request.app.state.console.app().schedules.pause(request.path_params["name"])
    return back(request, form, "/schedules")


async def resume(request: Request) -> Response:
    form = await action_form(request)
    await request.app.state.console.app().schedules.resume(request.path_params["name"])
    return back(request, form, "/schedules")


async def trigger(request: Request) -> Response:
    """Enqueue the schedule's task now, with its args, queue and job options (`app.enqueue`): a run
    outside the ticks, so the schedule's history and next tick stay as they are."""
    await action_form(request)
    app = request.app.state.console.app()
    s = await app.schedules.get(request.path_params["name"])
    options: dict[str, object] = {"queue": s.queue, "priority": s.priority}
    if s.lock_key:
        options["lock_key"] = s.lock_key
    if s.max_attempts is not None:
        options["max_attempts"] = s.max_attempts
    if s.lease_ttl_sec is not None:
        options["lease_ttl_sec"] = s.lease_ttl_sec
    job = await app.enqueue(s.task, s.args if isinstance(s.args, dict) else {}, **options)  # type: ignore[arg-type]
    root = request.scope.get("root_path", "")
    return RedirectResponse(f"{root}/jobs/{job.id}", status_code=303)


BASE = "/schedules/{name}"
routes = [Route("/schedules", listing, methods=["GET"]), Route(BASE, show, methods=["GET"]),
          Route(BASE + "/pause", pause, methods=["POST"]), Route(BASE + "/resume", resume, methods=["POST"]),
          Route(BASE + "/trigger", trigger, methods=["POST"])]
