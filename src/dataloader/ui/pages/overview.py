"""Overview: every queue's depth (due, delayed, running, held), paused or not, the oldest due job's
age, throughput and failure rate over the last day from the stats rollup, and the nodes with their
load. The queue and node tables are live (topic `overview`); the charts come from the hourly rollup
and are drawn once per page view. Actions: pause and resume a queue."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from dataloader.ui import render
from dataloader.ui.actions import action_form, back
from dataloader.ui.topic import Topic

if TYPE_CHECKING:
    from dataloader.app import App

NAV = ("Overview", "/")


async def live_state(app: App) -> dict[str, Any]:
    """What the live part shows: one row per queue (depth and flow state merged by name), nodes."""
    depths = {d.queue: d for d in await app.queue_depths()}
    flows = {f.queue: f for f in await app.queues()}
    queues = [{"name": name, "depth": depths.get(name), "flow": flows.get(name)}
              for name in sorted(set(depths) | set(flows))]
    nodes = await app.observers.nodes()
    return {"queues": queues, "nodes": nodes}


async def render_live(app: App, arg: str, root: str) -> str:
    return render.fragment("overview_live.html", root=root, csrf="", read_only=app.settings.ui_read_only,
                           **await live_state(app))


def chart_series(report: dict[str, Any], start: datetime, hours: int) -> dict[str, Any]:
    """Per hour, summed over queues: finished jobs, and the share of them that failed or were lost."""
    totals = [0] * hours
    failed = [0] * hours
    for queue in report["queues"]:
        for bucket in queue["hours"]:
            index = int((bucket["hour"] - start).total_seconds() // 3600)
            if 0 <= index < hours:
                totals[index] += bucket["total"]
                finished = bucket["finished"]
                failed[index] += finished.get("failed", 0) + finished.get("lost", 0)
    x = [int((start + timedelta(hours=i)).timestamp()) for i in range(hours)]
    rate = [round(100 * f / t, 2) if t else None for f, t in zip(failed, totals, strict=True)]
    return {"x": x, "throughput": totals, "failed": failed, "failure_rate": rate}


def summary(series: dict[str, Any]) -> dict[str, Any]:
    def window(n: int) -> dict[str, Any]:
        total = sum(series["throughput"][-n:])
        failed = sum(series["failed"][-n:])
        return {"finished": total, "failure_rate": round(100 * failed / total, 2) if total else None}
    return {"hour": window(1), "day": window(24)}


async def show(request: Request) -> Response:
    console = request.app.state.console
    app = console.app()
    now = datetime.now(UTC)
    start = now.replace(minute=0, second=0, microsecond=0) - timedelta(hours=23)
    report = await app.stats(start=start, end=now)
    series = chart_series(report, start, 24)
    return render.page(request, "overview.html", **await live_state(app), chart=json.dumps(series),
                       totals=summary(series), rolled_up_to=report.get("rolled_up_to"))


async def pause(request: Request) -> Response:
    form = await action_form(request)
    await request.app.state.console.app().pause_queue(form.get("queue", ""))
    return back(request, form, "/")


async def resume(request: Request) -> Response:
    form = await action_form(request)
    await request.app.state.console.app().resume_queue(form.get("queue", ""))
    return back(request, form, "/")


routes = [Route("/", show, methods=["GET"]), Route("/queues/pause", pause, methods=["POST"]),
          Route("/queues/resume", resume, methods=["POST"])]
TOPICS = {"overview": Topic(render_live)}
