"""CI (.ci/run) runs the README's test command verbatim, and that command picks up the suite's
parallel run and its durations line from pyproject's addopts."""

from __future__ import annotations

import shlex
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def readme_test_command() -> str:
    section = ROOT.joinpath("README.md").read_text().split("## Run the tests", 1)[1].split("\n## ", 1)[0]
    return section.split("```bash\n", 1)[1].split("\n", 1)[0]


def test_ci_runs_the_readmes_test_command():
    command = readme_test_command()
    assert command.endswith("python -m pytest -q"), command
    assert command in ROOT.joinpath(".ci/run").read_text().splitlines()


def test_the_suite_runs_in_parallel_and_reports_its_slowest_steps():
    with ROOT.joinpath("pyproject.toml").open("rb") as f:
        options = tomllib.load(f)["tool"]["pytest"]["ini_options"]
    addopts = shlex.split(options["addopts"])
    assert "--durations=25" in addopts
    assert "-n" in addopts and "--dist" in addopts
    declared = {line.split(":", 1)[0] for line in options["markers"]}
    assert {"unit", "db", "process", "chaos", "slow", "exclusive"} <= declared
