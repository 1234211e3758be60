"""DataloaderTablesGrowWithoutBacklog through `promtool test rules`, over series made from a real
node's scrape: every `dl_storage_table_bytes` series and the queued count a real node reports,
then 8 hours in which one table grows by 4 MiB a minute (1.4 GiB in 6 h). It fires when the
backlog stays flat, and not when the backlog grows with the table, nor when nothing grows.

The harness of test_alert_rules.py feeds an hour in which the state persists; a growth over 6
hours needs series of its own, written here in promtool's expanding notation (`a+bxN`)."""

from __future__ import annotations

import httpx
import pytest
import yaml

from dataloader.api import create_app
from tests.metrics.conftest import Samples, parse
from tests.metrics.promtool import RULES, _series_name, rules, run_promtool
from tests.support.engine import enqueue

pytestmark = pytest.mark.process  # promtool runs as a process of its own

ALERT = "DataloaderTablesGrowWithoutBacklog"
# 8 hours in 5-minute steps: enough for a 6-hour offset and the rule's 30 minutes, at a fifth of
# the evaluations of 1-minute steps (promtool evaluates every rule of the file at each step).
STEP = "5m"
STEPS = 96
GROWTH_PER_STEP = 20 * 1024 * 1024
# The tables whose real sizes are fed (all of them would only make promtool slower, not the test surer).
HOT = ("dl_jobs", "dl_job_events", "dl_storage_samples")


async def _page(obs_app, db) -> Samples:
    await db.execute("TRUNCATE dl_storage_samples")
    await enqueue(db, "dl.noop", queue="storage-alert-q")
    await obs_app.health.sample_storage()
    transport = httpx.ASGITransport(app=create_app(obs_app.settings, context=obs_app))
    async with httpx.AsyncClient(transport=transport, base_url="http://node") as client:
        return parse((await client.get("/metrics")).text)


def _series(page: Samples, *, table_grows: bool, backlog_grows: bool) -> list[dict[str, str]]:
    out = []
    for (name, labels), value in sorted(page.items()):
        if name == "dl_storage_table_bytes" and dict(labels)["table"] in HOT:
            grows = table_grows and dict(labels) == {"table": "dl_job_events", "part": "heap"}
            step = GROWTH_PER_STEP if grows else 0
        elif name == "dl_queue_jobs" and dict(labels).get("status") == "queued":
            step = 250 if backlog_grows else 0
        else:
            continue
        out.append({"series": _series_name(name, labels), "values": f"{value:g}+{step}x{STEPS - 1}"})
    assert any(s["series"].startswith("dl_storage_table_bytes") for s in out)
    assert any(s["series"].startswith("dl_queue_jobs") for s in out)
    return out


def _test(series: list[dict[str, str]], fires: bool) -> dict:
    rule = next(r for r in rules() if r["alert"] == ALERT)
    expected = [{"exp_labels": dict(rule["labels"]), "exp_annotations": rule["annotations"]}] if fires else []
    return {"interval": STEP, "input_series": series,
            "alert_rule_test": [{"eval_time": "7h50m", "alertname": ALERT, "exp_alerts": expected},
                                # before 6 h of history there is nothing to compare with
                                {"eval_time": "5h", "alertname": ALERT, "exp_alerts": []}]}


async def test_tables_grow_without_backlog(obs_app, db, tmp_path):
    page = await _page(obs_app, db)
    scenarios = [
        _test(_series(page, table_grows=True, backlog_grows=False), fires=True),    # bloat
        _test(_series(page, table_grows=True, backlog_grows=True), fires=False),    # load: more work waiting
        _test(_series(page, table_grows=False, backlog_grows=False), fires=False),  # a steady state
    ]
    test_file = tmp_path / "storage_alert_test.yml"
    test_file.write_text(yaml.safe_dump({"rule_files": [str(RULES)], "evaluation_interval": STEP,
                                         "tests": scenarios}, sort_keys=False))
    result = run_promtool("test", "rules", str(test_file))
    assert result.returncode == 0, f"promtool test rules failed:\n{result.stdout}\n{result.stderr}"
