"""Feeding a real node's scraped /metrics to `promtool test rules`.

A scenario is two scrapes of a real node, `before` and `after` the system was put in a state. The
series given to promtool say "the state persists": a gauge keeps its `after` value, an age (a
wait so far, a transaction's age) grows by 60 s per minute from it, and a counter grows every
minute by what it grew between the two scrapes. promtool then evaluates the repository's rules
over an hour of that and reports whether the expected alerts (and only those) fired.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Iterable, Mapping
from pathlib import Path

import pytest
import yaml

from tests.metrics.conftest import Samples

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "deploy" / "prometheus" / "dataloader-alerts.yml"
MINUTES = 60
EVAL_AT = "50m"
INSTANCE = {"instance": "node-a:8000", "job": "dataloader"}
# Gauges that are "seconds so far": while the state persists they grow with the clock.
AGES = frozenset({"dl_queue_oldest_runnable_age_seconds", "dl_jobs_lease_expired_oldest_seconds",
                  "dl_jobs_held_oldest_seconds", "dl_observers_waiting_oldest_seconds",
                  "dl_db_oldest_xmin_age_seconds"})


def promtool_path() -> str:
    """promtool, or a skip with the reason here and a failure under CI (which installs it)."""
    found = shutil.which("promtool")
    if found is None:
        message = "promtool is not installed (Debian: apt-get install prometheus); .ci/run installs it"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    return found


def run_promtool(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([promtool_path(), *args], capture_output=True, text=True, timeout=60)


def _series_name(name: str, labels: Iterable[tuple[str, str]]) -> str:
    pairs = dict(labels) | INSTANCE
    inner = ",".join(f'{k}="{_escape(v)}"' for k, v in sorted(pairs.items()))
    return f"{name}{{{inner}}}"


def _escape(text: str) -> str:
    return text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def series(before: Samples, after: Samples, *, persists: bool = True) -> list[dict[str, str]]:
    """promtool input_series for MINUTES one-minute steps (see the module's docstring). With
    `persists=False` (a healthy system) ages do not grow: its waits end, they do not pile up."""
    out = []
    read = names_the_rules_read()
    for key in sorted(after):
        name, labels = key
        # only what some rule reads: the suite's database holds every other test's queues, and
        # promtool's time grows with the series it is given (seconds per test, for series no alert sees)
        if name not in read:
            continue
        end = after[key]
        if name.endswith("_total"):
            start = before.get(key, 0.0)
            step = max(end - start, 0.0)
            values = [start + step * t for t in range(MINUTES)]
        elif name in AGES and persists:
            values = [end + 60.0 * t for t in range(MINUTES)]
        else:
            values = [end] * MINUTES
        out.append({"series": _series_name(name, labels), "values": " ".join(f"{v:g}" for v in values)})
    return out


def names_the_rules_read() -> frozenset[str]:
    """Every `dl_` series name that some alert's or recording rule's expression names."""
    groups = yaml.safe_load(RULES.read_text())["groups"]
    return frozenset(n for g in groups for r in g["rules"] for n in re.findall(r"\bdl_[a-z0-9_]+", r["expr"]))


def rules() -> list[dict]:
    return [r for g in yaml.safe_load(RULES.read_text())["groups"] for r in g["rules"] if "alert" in r]


def alert_names() -> list[str]:
    return [r["alert"] for r in rules()]


def _annotations(rule: dict, labels: Mapping[str, str]) -> dict[str, str]:
    """The rule's annotations as Prometheus renders them for `labels` (they use only $labels)."""
    return {k: re.sub(r"\{\{ \$labels\.(\w+) \}\}", lambda m: labels.get(m.group(1), ""), v)
            for k, v in rule.get("annotations", {}).items()}


def expect(before: Samples, after: Samples, fired: Mapping[str, list[dict[str, str]]], tmp: Path, *,
           persists: bool = True, silent: Iterable[str] = ()) -> None:
    """Assert through promtool that, fed these scrapes, each alert of `fired` fires with exactly
    those label sets, and each alert of `silent` does not fire."""
    by_name = {r["alert"]: r for r in rules()}
    checks = []
    for name, label_sets in fired.items():
        assert label_sets, f"{name}: say which label sets fire"
        exp = []
        for labels in label_sets:
            full = {**labels, "severity": by_name[name]["labels"]["severity"]}
            exp.append({"exp_labels": full, "exp_annotations": _annotations(by_name[name], full)})
        checks.append({"eval_time": EVAL_AT, "alertname": name, "exp_alerts": exp})
    for name in silent:
        assert name in by_name, name
        checks.append({"eval_time": EVAL_AT, "alertname": name, "exp_alerts": []})
    test_file = tmp / "alerts_test.yml"
    test_file.write_text(yaml.safe_dump({
        "rule_files": [str(RULES)],
        "evaluation_interval": "1m",
        "tests": [{"interval": "1m", "input_series": series(before, after, persists=persists),
                   "alert_rule_test": checks}],
    }, sort_keys=False))
    result = run_promtool("test", "rules", str(test_file))
    assert result.returncode == 0, f"promtool test rules failed:\n{result.stdout}\n{result.stderr}"
