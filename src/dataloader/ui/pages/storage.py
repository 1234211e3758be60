"""Storage: the queue's own tables as the leader's storage sampler last saw them (health/storage.py,
docs/observability.md "Storage") — heap, index and TOAST bytes, how each grew over 1 h, 6 h and
24 h with its hourly trend, dead tuples, the last autovacuum and autoanalyze — and what holds the
xmin horizon back now. A steady state reads as flat trends and small changes; a bloat as a table
that grows while its live tuples do not."""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from dataloader.ui import render

NAV = ("Storage", "/storage")
TOPICS: dict = {}
SPARK_WIDTH, SPARK_HEIGHT = 96, 20


def size(n: int | None, *, change: bool = False) -> str:
    """Bytes as an operator reads them: 0 B, 8.0 KiB, 1.4 GiB; a `change` says + when it grew."""
    if n is None:
        return "—"
    sign = "-" if n < 0 else ("+" if n > 0 and change else "")
    value = float(abs(n))
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or unit == "TiB":
            return f"{sign}{value:.0f} {unit}" if unit == "B" else f"{sign}{value:.1f} {unit}"
        value /= 1024
    return f"{sign}{value:.1f} TiB"  # pragma: no cover - the loop returns


def spark(values: list[int]) -> str:
    """The points of an SVG polyline of `values` (oldest left), scaled to the box; empty under two."""
    if len(values) < 2:
        return ""
    low, high = min(values), max(values)
    span = (high - low) or 1
    step = SPARK_WIDTH / (len(values) - 1)
    return " ".join(f"{i * step:.1f},{SPARK_HEIGHT - 1 - (v - low) / span * (SPARK_HEIGHT - 2):.1f}"
                    for i, v in enumerate(values))


def rows(tables: list[Any]) -> list[dict[str, Any]]:
    return [{"table": t.table, "total": size(t.total_bytes), "heap": size(t.heap_bytes),
             "indexes": size(t.index_bytes), "toast": size(t.toast_bytes),
             "changes": {k: size(v, change=True) for k, v in t.changes.items()},
             "growing": (t.changes.get("6h") or 0) > 0, "spark": spark(t.trend), "live": t.live_tuples,
             "dead": t.dead_tuples, "last_autovacuum": t.last_autovacuum, "last_autoanalyze": t.last_autoanalyze}
            for t in tables]


async def show(request: Request) -> Response:
    app = request.app.state.console.app()
    report = await app.health.storage()
    return render.page(request, "storage.html", report=report, total=size(report.total_bytes),
                       tables=rows(report.tables), width=SPARK_WIDTH, height=SPARK_HEIGHT)


routes = [Route("/storage", show, methods=["GET"])]
