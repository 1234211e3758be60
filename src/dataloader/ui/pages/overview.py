"""Overview: every queue's depth (due, delayed, running, held), paused or not, served by a live node
or not, the oldest due job's age, throughput and failure rate over the last day from the stats
rollup (plus the jobs finished since its last run), and the nodes with their load. The queue and
node tables are live (topic `overview`); the charts are drawn once per page view. Actions: pause
and resume a queue, change its limits (flow control: docs/flow-control.md) through
app.configure_queue, read from the form as the CLI reads its options; each says what it did."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from dataloader.model.flow import (
    QueueFlow,
    QueueSettings,
    TaskFlow,
    TaskSettings,
    changes_from_text,
    format_rate,
    task_changes_from_text,
)
from dataloader.ui import render
from dataloader.ui.actions import action_form, back
from dataloader.ui.render import Can
from dataloader.ui.topic import Topic

if TYPE_CHECKING:
    from dataloader.app import App

NAV = ("Overview", "/")


def flow_summary(flow: QueueFlow | None) -> list[str]:
    """A queue's flow control in words, for its row: limits with their use, fair share, paused
    tasks, jobs held back and the autoscaling signal. Empty for a queue with none of them."""
    if flow is None:
        return []
    settings, said = flow.settings, []
    if settings.concurrency is not None:
        said.append(f"concurrency {flow.running}/{settings.concurrency}")
    if settings.partition_concurrency is not None:
        said.append(f"{settings.partition_concurrency} per partition")
    if settings.rate_limit is not None:
        said.append(f"rate {format_rate(settings.rate_limit, settings.rate_period_sec)}")
    if settings.partition_rate_limit is not None:
        said.append(f"{format_rate(settings.partition_rate_limit, settings.partition_rate_period_sec)} per partition")
    if settings.fair_share:
        said.append("fair share")
    if flow.paused_tasks:
        said.append("paused tasks: " + ", ".join(sorted(flow.paused_tasks)))
    for task, limited in sorted(flow.task_limits.items()):
        said.append(f"task {task}: " + task_summary(limited))
    held = sum(flow.held_back.values())
    if held:
        said.append(f"{held} held back")
    if flow.desired_workers is not None and (said or flow.queued):
        said.append(workers_needed(flow.desired_workers))
    return said


def workers_needed(desired: int) -> str:
    """The autoscaling signal (docs/flow-control.md "Autoscaling") in words: how many of the queue's
    jobs should run at once, over all nodes, to keep up with its backlog."""
    if desired <= 0:
        return "needs no worker now"
    return f"needs {desired} job{'' if desired == 1 else 's'} running at once to keep up"


def task_summary(task: TaskFlow) -> str:
    """A limited task's limits with their use (0027): "concurrency 2/3, rate 10/1s (3 in window), 4 held back"."""
    settings, said = task.settings, []
    if settings.concurrency is not None:
        said.append(f"concurrency {task.running}/{settings.concurrency}")
    if settings.rate_limit is not None:
        said.append(f"rate {format_rate(settings.rate_limit, settings.rate_period_sec)} ({task.starts} in window)")
    held = max(task.held_back.values())  # a job two limits hold back is one job
    if held:
        said.append(f"{held} held back")
    return ", ".join(said)


def limit_texts(flow: QueueFlow | None) -> dict[str, str]:
    """Each limit as its form field reads it ("none" when unset): the limits form's placeholders."""
    settings = flow.settings if flow is not None else QueueSettings()
    return {"concurrency": str(settings.concurrency or "none"),
            "partition_concurrency": str(settings.partition_concurrency or "none"),
            "rate": format_rate(settings.rate_limit, settings.rate_period_sec) or "none",
            "partition_rate": format_rate(settings.partition_rate_limit, settings.partition_rate_period_sec) or "none"}


async def live_state(app: App) -> dict[str, Any]:
    """What the live part shows: one row per queue (depth and flow state merged by name), nodes."""
    # three independent reads on their own connections: the page waits for the slowest, not the sum
    # (each count of a big backlog is an index walk of ~0.1 s)
    depth_rows, flow_rows, nodes = await asyncio.gather(app.queue_depths(), app.queues(), app.observers.nodes())
    depths = {d.queue: d for d in depth_rows}
    flows = {f.queue: f for f in flow_rows}
    sharded = bool(app.settings.shards_json)  # name each queue's shard only when there are several
    served = served_queues(nodes)
    queues = [{"name": name, "depth": depths.get(name), "flow": flows.get(name),
               "flow_summary": flow_summary(flows.get(name)), "limits": limit_texts(flows.get(name)),
               "shard": app.shard_of(name) if sharded else None, "served": name in served}
              for name in sorted(set(depths) | set(flows))]
    return {"queues": queues, "nodes": nodes}


def served_queues(nodes: list[Any]) -> set[str]:
    """The queues some live node runs workers for (its WORKERS_JSON, as it registered them): a queue
    outside this set has jobs that nothing will run until such a node starts."""
    return {queue for node in nodes if node.state == "live" for queue in node.queues}


async def render_live(app: App, arg: str, root: str, can: Can) -> str:
    return render.fragment("overview_live.html", root=root, csrf="", can=can,
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
    report = await app.stats(start=start, end=now, unrolled=True)
    series = chart_series(report, start, 24)
    return render.page(request, "overview.html", **await live_state(app), chart=json.dumps(series),
                       totals=summary(series), rolled_up_to=report.get("rolled_up_to"))


async def pause(request: Request) -> Response:
    form = await action_form(request)
    flow = await request.app.state.console.app().pause_queue(form.get("queue", ""))
    return back(request, form, "/", f"Queue {flow.queue} paused: no job of it starts until it is resumed; "
                                    "running jobs finish.")


async def resume(request: Request) -> Response:
    form = await action_form(request)
    flow = await request.app.state.console.app().resume_queue(form.get("queue", ""))
    return back(request, form, "/", f"Queue {flow.queue} resumed: its workers on every node wake now.")


async def limits(request: Request) -> Response:
    """Change a queue's limits, or with a task named one task's: each field left empty is kept,
    "none" clears it (the CLI's `queues set` options, read by the same functions)."""
    form = await action_form(request)
    fields = {name: form.get(name, "").strip() or None
              for name in ("concurrency", "partition_concurrency", "rate", "partition_rate")}
    task = form.get("task", "").strip() or None
    app = request.app.state.console.app()
    if task is not None:  # one task's own limits (0027), read as `queues set --task` reads them
        flow = await app.configure_task(form.get("queue", ""), task, **task_changes_from_text(**fields))
        limited = flow.task_limits.get(task)
        now = limited.settings if limited is not None else TaskSettings()  # every limit cleared
        said = (f"Limits of task {task} in queue {flow.queue} set: concurrency {now.concurrency or 'none'}, "
                f"rate {format_rate(now.rate_limit, now.rate_period_sec) or 'none'}.")
    else:
        flow = await app.configure_queue(form.get("queue", ""), **changes_from_text(**fields))
        texts = limit_texts(flow)
        said = (f"Limits of queue {flow.queue} set: concurrency {texts['concurrency']}, per partition "
                f"{texts['partition_concurrency']}, rate {texts['rate']}, partition rate {texts['partition_rate']}.")
    return back(request, form, "/", said)


routes = [Route("/", show, methods=["GET"]), Route("/queues/pause", pause, methods=["POST"]),
          Route("/queues/resume", resume, methods=["POST"]), Route("/queues/limits", limits, methods=["POST"])]
TOPICS = {"overview": Topic(render_live)}
