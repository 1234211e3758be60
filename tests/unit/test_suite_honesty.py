"""The suite keeps itself honest (issue 35): a test that starts a process while tiered `unit` or `db`
fails the run, a test that restarts PostgreSQL without an `exclusive` marker fails, and a misspelt
marker is an error. Shown on a small suite of its own, run by a real pytest with this suite's hooks
(tests/conftest.py, tests/support/tiers.py)."""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

CONFTEST = '''
import pytest

import tests.conftest as suite

# the suite's hooks, every one it has
globals().update({name: getattr(suite, name) for name in dir(suite) if name.startswith("pytest_")})


@pytest.fixture
def restart():
    return None
'''

TESTS = '''
import subprocess
import sys

import pytest


def test_starts_a_process_untiered():
    subprocess.run([sys.executable, "-c", "pass"], check=True)


@pytest.mark.process
def test_starts_a_process_tiered():
    subprocess.run([sys.executable, "-c", "pass"], check=True)


def test_restarts_without_exclusive(restart):
    pass


@pytest.mark.exclusive(when="shared_server")
def test_restarts_marked_exclusive(restart):
    pass


def test_plain():
    pass
'''

MISSPELT = '''
import pytest


@pytest.mark.exclusiv
def test_misspelt():
    pass
'''


def run_suite(tmp_path: Path, files: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """pytest on `files` with this repository's pytest settings (its markers and addopts, minus xdist)."""
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]
    words = pyproject["addopts"].split()
    xdist = {i for i, word in enumerate(words) if word in ("-n", "--dist")}
    addopts = [w for i, w in enumerate(words) if i not in xdist and i - 1 not in xdist]  # an option and its value
    markers = "\n    ".join(pyproject["markers"])
    (tmp_path / "pytest.ini").write_text(f"[pytest]\naddopts = {' '.join(addopts)}\nmarkers =\n    {markers}\n")
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("PYTEST_XDIST_WORKER", None)
    env.pop("PYTEST_XDIST_WORKER_COUNT", None)
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:xdist", "-rA",
                           "-c", str(tmp_path / "pytest.ini"), "--rootdir", str(tmp_path), str(tmp_path)],
                          capture_output=True, text=True, cwd=tmp_path, env=env, timeout=120)


def outcomes(output: str) -> dict[str, set[str]]:
    found: dict[str, set[str]] = {}
    for line in output.splitlines():
        word, _, rest = line.partition(" ")
        if word in ("PASSED", "FAILED", "ERROR") and "::" in rest:
            found.setdefault(rest.split("::", 1)[1].split(" ", 1)[0], set()).add(word)
    return found


@pytest.mark.process
def test_the_tier_audit_and_the_exclusive_check_fail_the_run(tmp_path: Path) -> None:
    done = run_suite(tmp_path, {"conftest.py": CONFTEST, "test_inner.py": TESTS})
    found = outcomes(done.stdout)
    assert done.returncode == 1, done.stdout + done.stderr
    assert found["test_starts_a_process_untiered"] == {"PASSED", "ERROR"}, done.stdout  # failed at its teardown
    assert "started a process but is tiered `unit`: mark it @pytest.mark.process" in done.stdout
    assert found["test_restarts_without_exclusive"] == {"ERROR"}, done.stdout  # failed at its setup
    assert "without an exclusive marker" in done.stdout
    for fine in ("test_starts_a_process_tiered", "test_restarts_marked_exclusive", "test_plain"):
        assert found[fine] == {"PASSED"}, (fine, done.stdout)


@pytest.mark.process
def test_a_misspelt_marker_is_an_error(tmp_path: Path) -> None:
    done = run_suite(tmp_path, {"conftest.py": CONFTEST, "test_inner.py": MISSPELT})
    assert done.returncode != 0 and "'exclusiv' not found in `markers`" in done.stdout + done.stderr, done.stdout
