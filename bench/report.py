"""The table (metric × system), the JSON file, and the comparison with the previous result."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

RESULTS_DIR = Path(__file__).resolve().parent / "results"


@dataclass(frozen=True)
class Metric:
    label: str
    unit: str
    higher_is_better: bool


def _metrics() -> dict[str, Metric]:
    m: dict[str, Metric] = {
        "enqueue.single": Metric("enqueue, one call per job", "jobs/s", True),
        "enqueue.single_tx": Metric("enqueue, one call per job in the caller's transaction", "jobs/s", True),
        "enqueue.batch": Metric("enqueue, batch API ×1000", "jobs/s", True),
        "enqueue.one_call": Metric("enqueue, the whole batch in one call", "jobs/s", True),
    }
    for key, what in (("single", "one call per job"), ("single_tx", "one call per job in the caller's transaction"),
                      ("batch", "batch API ×1000"), ("one_call", "the whole batch in one call")):
        m[f"enqueue.{key}.cpu_client_us"] = Metric(f"enqueue, {what}: client CPU per job", "µs", False)
        m[f"enqueue.{key}.cpu_db_us"] = Metric(f"enqueue, {what}: PostgreSQL CPU per job", "µs", False)
    for p, what in (("p1", "1 worker ×16"), ("p2", "2 workers ×16")):
        m[f"processing.{p}.active"] = Metric(f"drain no-ops, {what}, first start→last finish", "jobs/s", True)
        m[f"processing.{p}.wall"] = Metric(f"drain no-ops, {what}, spawn→drained (wall)", "jobs/s", True)
        m[f"processing.{p}.tx_per_job"] = Metric(f"drain no-ops, {what}: DB transactions per job", "tx", False)
        m[f"processing.{p}.wal_per_job"] = Metric(f"drain no-ops, {what}: WAL bytes per job", "B", False)
        m[f"processing.{p}.cpu_worker_us"] = Metric(f"drain no-ops, {what}: worker CPU per job", "µs", False)
        m[f"processing.{p}.cpu_db_us"] = Metric(f"drain no-ops, {what}: PostgreSQL CPU per job", "µs", False)
        m[f"processing.{p}.cpu_worker_steady_us"] = Metric(
            f"drain no-ops, {what}: worker CPU per job, 10-90 % of the drain", "µs", False)
        m[f"processing.{p}.cpu_db_steady_us"] = Metric(
            f"drain no-ops, {what}: PostgreSQL CPU per job, 10-90 % of the drain", "µs", False)
    m["latency.p50"] = Metric("enqueue→start latency p50 (idle worker)", "ms", False)
    m["latency.p95"] = Metric("enqueue→start latency p95", "ms", False)
    m["latency.p99"] = Metric("enqueue→start latency p99", "ms", False)
    for shape, what in (("now", "all runnable"), ("delayed", "99% delayed")):
        for size in ("10k", "100k", "1M"):
            for q in ("p50", "p95"):
                m[f"claim.{shape}.{size}.{q}"] = Metric(f"claim statement, {size} queued, {what}, {q}", "ms",
                                                        False)
    m["handoff.p50"] = Metric("serialized handoff (end→next start) p50", "ms", False)
    m["handoff.p99"] = Metric("serialized handoff p99", "ms", False)
    m["handoff.done"] = Metric("serialized jobs run within the time limit (of 200; quick 50)", "jobs", True)
    m["handoff.overlaps"] = Metric("serialized jobs that overlapped (must be 0)", "count", False)
    m["idle.tps"] = Metric("idle worker, DB transactions per second", "tx/s", False)
    m["http.rps"] = Metric("HTTP POST /api/v1/jobs/trigger, 8 clients", "req/s", True)
    m["http.batch_jobs"] = Metric("HTTP POST /api/v1/jobs/batch ×1000, 8 clients", "jobs/s", True)
    m["prune.drain_alone"] = Metric("drain of 100k jobs beside 1M old finished ones, no pruner", "jobs/s", True)
    m["prune.drain_beside"] = Metric("the same drain while the pruner deletes the 1M", "jobs/s", True)
    m["prune.drain_ratio"] = Metric("drain rate with / without the pruner", "ratio", True)
    m["prune.rows_per_sec"] = Metric("prune rate (finished jobs + their journal rows)", "jobs/s", True)
    m["prune.batch_p50_ms"] = Metric("one prune batch (1000 jobs), p50", "ms", False)
    m["prune.batch_p99_ms"] = Metric("one prune batch (1000 jobs), p99", "ms", False)
    for p, what in (("p1", "1 worker"), ("p2", "2 workers")):
        m[f"memory.{p}.peak"] = Metric(f"RSS peak during drain, {what} (sum)", "MB", False)
        for q in ("10", "50", "90"):
            m[f"memory.{p}.rss{q}"] = Metric(f"RSS at {q}% of drain, {what}", "MB", False)
    return m


METRICS = _metrics()


def _fmt(value: float | None) -> str:
    if value is None:
        return "-"
    if abs(value) >= 100:
        return f"{value:,.0f}"
    if abs(value) >= 10:
        return f"{value:.1f}"
    return f"{value:.2f}"


def cell(summary: dict[str, Any] | None) -> str:
    if summary is None:
        return ""
    if summary["median"] is None:
        return "failed"
    text = _fmt(summary["median"])
    runs = [r for r in summary["runs"] if r is not None]
    if len(runs) > 1:
        text += f" ({_fmt(summary['min'])}–{_fmt(summary['max'])})"
    if summary["failed"]:
        text += f" [{summary['failed']} failed]"
    return text


def table(results: dict[str, Any], systems: list[str]) -> str:
    """A Markdown table: one row per metric that any system produced, one column per system."""
    metrics: dict[str, dict[str, Any]] = {}
    for measure in results["measures"].values():
        metrics.update(measure.get("metrics", {}))
    header = ["measure", "unit", *systems]
    rows = [header, ["---"] * len(header)]
    for key, meta in METRICS.items():
        if key not in metrics:
            continue
        rows.append([meta.label, meta.unit, *(cell(metrics[key].get(s)) or "n/a" for s in systems)])
    for name, measure in results["measures"].items():
        if "n/a" in measure.get("info", {}):
            rows.append([name, "", *(f"n/a ({measure['info']['n/a']})" if s == "dataloader" else "n/a"
                                     for s in systems)])
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    return "\n".join("| " + " | ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) + " |"
                     for r in rows)


def pair_ratios(results: dict[str, Any], ours: str, peer: str) -> str:
    """A Markdown table of `ours / peer` per interleaved pair (run i of each system ran back to back),
    with the median and spread of those ratios: a verdict needs the spread on its side, not only
    the medians. Higher is better for throughputs; for latencies, RSS and costs lower is."""
    metrics: dict[str, dict[str, Any]] = {}
    for measure in results["measures"].values():
        metrics.update(measure.get("metrics", {}))
    rows = [["measure", f"{ours} / {peer} per pair", "median (min–max)", "better when"], ["---"] * 4]
    for key, meta in METRICS.items():
        a, b = metrics.get(key, {}).get(ours), metrics.get(key, {}).get(peer)
        if not a or not b:
            continue
        pairs = [x / y for x, y in zip(a["runs"], b["runs"], strict=False) if x is not None and y]
        if not pairs:
            continue
        ordered = sorted(pairs)
        mid = len(ordered) // 2
        median = ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2
        rows.append([meta.label, ", ".join(f"{r:.2f}" for r in pairs),
                     f"{median:.2f} ({ordered[0]:.2f}–{ordered[-1]:.2f})", "> 1" if meta.higher_is_better else "< 1"])
    if len(rows) == 2:
        return ""
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    return "\n".join("| " + " | ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) + " |" for r in rows)


def previous_result(exclude: Path | None = None) -> Path | None:
    files = sorted(p for p in RESULTS_DIR.glob("*.json") if p != exclude)
    return files[-1] if files else None


def compare(new: dict[str, Any], old: dict[str, Any], old_name: str) -> str:
    """Median against median for every metric both files have; ratio new/old and whether that is
    better or worse for the metric's direction (noise of a few % is normal on a shared machine)."""
    def flat(res: dict[str, Any]) -> dict[tuple[str, str], float]:
        out: dict[tuple[str, str], float] = {}
        for measure in res.get("measures", {}).values():
            for key, per_system in measure.get("metrics", {}).items():
                for system, summary in per_system.items():
                    if summary.get("median") is not None:
                        out[(key, system)] = summary["median"]
        return out

    a, b = flat(old), flat(new)
    lines = [f"compared with {old_name}" + ("" if old.get("quick") == new.get("quick")
                                             else " (note: one of the two is a --quick run)")]
    for (key, system), value in sorted(b.items()):
        if (key, system) not in a or key not in METRICS:
            continue
        before = a[(key, system)]
        if before == 0:
            continue
        ratio = value / before
        meta = METRICS[key]
        better = ratio > 1 if meta.higher_is_better else ratio < 1
        verdict = "same" if abs(ratio - 1) < 0.05 else ("better" if better else "worse")
        lines.append(f"  {system:<14} {key:<26} {_fmt(before):>10} → {_fmt(value):>10} {meta.unit:<7}"
                     f" ×{ratio:.2f} {verdict}")
    if len(lines) == 1:
        lines.append("  (no metric in common)")
    return "\n".join(lines)


def _is_flat(value: Any) -> bool:
    scalar = (str, int, float, bool, type(None))
    return isinstance(value, list) and all(
        isinstance(v, scalar) or (isinstance(v, list) and all(isinstance(x, scalar) for x in v)) for v in value)


def dumps(value: Any, indent: int = 0) -> str:
    """JSON, indented, but with lists of numbers (samples, per-run values) on one line each, so a
    result file stays readable and diffable instead of one number per line."""
    pad = "  " * indent
    if isinstance(value, dict) and value:
        items = [f'{pad}  {json.dumps(str(k))}: {dumps(v, indent + 1)}' for k, v in value.items()]
        return "{\n" + ",\n".join(items) + f"\n{pad}}}"
    if isinstance(value, list) and value and not _is_flat(value):
        items = [f"{pad}  {dumps(v, indent + 1)}" for v in value]
        return "[\n" + ",\n".join(items) + f"\n{pad}]"
    return json.dumps(value, default=str)


def write(results: dict[str, Any], stamp: str) -> Path:
    RESULTS_DIR.mkdir(exist_ok=True)
    path = RESULTS_DIR / f"{stamp}.json"
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(dumps(results) + "\n")
    tmp.rename(path)
    return path
