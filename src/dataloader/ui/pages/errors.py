"""Top errors: failed and lost jobs grouped as the stats rollup groups them (the first line of the
error, trimmed, at most 200 characters), most frequent first, each linking to its jobs."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from dataloader.ui import filters, render

NAV = ("Errors", "/errors")
TOPICS: dict = {}
WINDOWS = {"1h": timedelta(hours=1), "24h": timedelta(hours=24), "7d": timedelta(days=7)}


def jobs_query(queue: str, group: str, since: str) -> str:
    """The jobs search of one group: the error's text is a glob whose own * and ? would be
    wildcards, so each becomes `?` (that one character); the rest of the error follows the line."""
    pattern = group.replace("*", "?") + "*" if group != "(no error text)" else ""
    values = {"queue": [queue], "status": ["failed", "lost"], "error": pattern, "finished_from": since}
    return filters.query_string(values)


async def show(request: Request) -> Response:
    app = request.app.state.console.app()
    window = request.query_params.get("window", "1h")
    if window not in WINDOWS:
        window = "1h"
    queue = request.query_params.get("queue") or None
    report = await app.stats_errors(queue=queue, since=datetime.now(UTC) - WINDOWS[window], limit=50)
    groups = [{**g, "query": jobs_query(g["queue"], g["error"], window)} for g in report["errors"]]
    return render.page(request, "errors.html", groups=groups, window=window, windows=list(WINDOWS), queue=queue or "")


routes = [Route("/errors", show, methods=["GET"])]
