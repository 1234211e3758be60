"""deploy/grafana/dataloader.json: every PromQL expression parses (promtool checks them as
recording rules) and names only metrics a real node's /metrics exposes; the alert rules too."""

from __future__ import annotations

import json
import re

import pytest
import yaml

from tests.metrics.conftest import QUEUE
from tests.metrics.promtool import ROOT, RULES, run_promtool
from tests.metrics.test_alert_rules import _job, _until_done

# promtool runs as a process of its own
pytestmark = pytest.mark.process

DASHBOARD = ROOT / "deploy" / "grafana" / "dataloader.json"
_SUFFIXES = {"histogram": ("_bucket", "_sum", "_count"), "summary": ("_sum", "_count")}


def dashboard_expressions() -> list[tuple[str, str]]:
    """(panel title, expr) of every target of every panel, rows' nested panels included."""
    found = []

    def walk(panels: list[dict]) -> None:
        for panel in panels:
            walk(panel.get("panels", []))
            found.extend((panel["title"], t["expr"]) for t in panel.get("targets", []))

    walk(json.loads(DASHBOARD.read_text())["panels"])
    return found


def metric_names(expr: str) -> set[str]:
    """The dl_* metric names an expression reads (label values in quotes are not names)."""
    return set(re.findall(r"\b(dl_[a-z0-9_]+)\b", re.sub(r'"[^"]*"', '""', expr)))


def exposed(text: str) -> set[str]:
    """Every sample name a /metrics page can carry: its samples, and each family it declares
    (a labelled family shows its samples only once it has some)."""
    names = set()
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(" ", 3)
            names.add(name)
            names.update(name + s for s in _SUFFIXES.get(kind, ()))
        elif line and not line.startswith("#"):
            names.add(re.split(r"[{ ]", line, maxsplit=1)[0])
    return names


def test_every_dashboard_expression_parses(tmp_path):
    exprs = dashboard_expressions()
    assert len(exprs) >= 30
    rules = tmp_path / "dashboard_rules.yml"
    rules.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": [
        {"record": f"dashboard:panel_{i}", "expr": expr} for i, (_, expr) in enumerate(exprs)]}]}))
    result = run_promtool("check", "rules", str(rules))
    assert result.returncode == 0, result.stdout + result.stderr


def test_dashboard_covers_what_an_operator_watches():
    text = DASHBOARD.read_text()
    rows = [p["title"] for p in json.loads(text)["panels"] if p["type"] == "row"]
    assert rows == ["Queues", "Workers and nodes", "Leader and duties", "Reaper", "Database", "Flow control"]
    for name in ("dl_queue_jobs", "dl_queue_oldest_runnable_age_seconds", "dl_jobs_finished_total", "dl_leader",
                 "dl_jobs_reaped_total", "dl_db_connections", "dl_db_oldest_xmin_age_seconds",
                 "dl_table_dead_tuples", "dl_queue_paused", "dl_nodes"):
        assert name in text, name


async def test_dashboard_and_rules_name_only_metrics_a_node_exposes(obs_app, db):
    import httpx

    from dataloader.api import create_app

    async with obs_app.running():  # a working node: its histograms and counters have samples
        await _until_done(obs_app, [await _job(obs_app, QUEUE)])
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=create_app(obs_app.settings, context=obs_app)),
                                     base_url="http://dataloader.test") as client:
            page = (await client.get("/metrics")).text
    names = exposed(page)
    missing = {(title, name) for title, expr in dashboard_expressions() for name in metric_names(expr)
               if name not in names}
    assert not missing, f"the dashboard reads metrics /metrics does not expose: {sorted(missing)}"
    rule_exprs = [r["expr"] for g in yaml.safe_load(RULES.read_text())["groups"] for r in g["rules"]]
    missing_in_rules = {n for e in rule_exprs for n in metric_names(e) if n not in names}
    assert not missing_in_rules, f"the alert rules read metrics /metrics does not expose: {sorted(missing_in_rules)}"
