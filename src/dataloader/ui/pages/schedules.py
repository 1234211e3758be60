"""Schedules (docs/patterns.md "Schedules"): every schedule with its next ticks and last run, a
schedule's page with its recent runs; actions pause, resume and trigger now, on the list and on a
schedule's own page."""

from __future__ import annotations

from datetime import UTC
from urllib.parse import quote

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from dataloader.ui import render
from dataloader.ui.actions import action_form, back, to

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
    name = request.path_params["name"]
    await request.app.state.console.app().schedules.pause(name)
    return back(request, form, "/schedules", f"Schedule {name} paused: no tick enqueues anything until it is resumed.")


async def resume(request: Request) -> Response:
    form = await action_form(request)
    app = request.app.state.console.app()
    name = request.path_params["name"]
    schedule = await app.schedules.resume(name)
    upcoming = app.schedules.upcoming(schedule, 1)
    then = f" (next at {upcoming[0].astimezone(UTC):%Y-%m-%d %H:%M:%S} UTC)" if upcoming else ""
    return back(request, form, "/schedules", f"Schedule {name} resumed: it ticks again from its next tick{then}.")


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
    return to(request, f"/jobs/{job.id}", f"Schedule {s.name} triggered: this job runs {s.task} in queue {s.queue} "
                                          "now, outside its ticks.")


BASE = "/schedules/{name}"
routes = [Route("/schedules", listing, methods=["GET"]), Route(BASE, show, methods=["GET"]),
          Route(BASE + "/pause", pause, methods=["POST"]), Route(BASE + "/resume", resume, methods=["POST"]),
          Route(BASE + "/trigger", trigger, methods=["POST"])]
