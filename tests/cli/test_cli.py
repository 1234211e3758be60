"""The CLI as a user runs it: the installed `dataloader` script in a project directory of their own.

- DL_PIPELINE_MODULES=myjobs finds ./myjobs.py without PYTHONPATH (the working directory is on
  sys.path, as with `python -m`, uvicorn and celery);
- a module that fails to import is one line and exit code 2, before anything starts;
- a bare `dataloader` prints help; a bare `python -m dataloader` runs the service.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import asyncpg
import httpx
import pytest

from tests.conftest import wait_until

pytestmark = pytest.mark.process  # every test runs the `dataloader` script

SCRIPT = str(Path(sys.executable).with_name("dataloader"))

MYJOBS = '''
from dataloader import pipeline


@pipeline("myjobs.hello")
async def hello(ctx):
    await ctx.progress({"said": "hello"})
'''


def user_env(dsn: str, **extra: str) -> dict[str, str]:
    """A user's shell: no PYTHONPATH, no DL_* leftovers, the test database."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("DL_", "WORKERS_JSON")) and k != "PYTHONPATH"}
    env.update({"DL_DB_DSN": dsn, "DL_LOG_FORMAT": "json", **extra})
    return env


def run(args: list[str], cwd: Path, env: dict[str, str], timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


async def test_pipeline_module_in_the_working_directory_needs_no_pythonpath(dsn, db, tmp_path):
    (tmp_path / "myjobs.py").write_text(MYJOBS)
    env = user_env(dsn, DL_PIPELINE_MODULES="myjobs")
    proc = await asyncio.to_thread(run, [SCRIPT, "jobs", "trigger", "--task", "myjobs.hello",
                                         "--lock-key", "cwd"], tmp_path, env)
    assert proc.returncode == 0, proc.stderr
    job = json.loads(proc.stdout)
    assert job["created"] is True
    assert await db.fetchval("SELECT task FROM dl_jobs WHERE job_id = $1", job["job_id"]) == "myjobs.hello"


@pytest.mark.parametrize("command", [
    ["serve"],
    ["worker"],
    ["jobs", "trigger", "--task", "dl.noop", "--lock-key", "k"],
    ["jobs", "status", "00000000-0000-0000-0000-000000000000"],
    ["jobs", "cancel", "00000000-0000-0000-0000-000000000000"],
    ["jobs", "events", "00000000-0000-0000-0000-000000000000"],
])
async def test_a_module_that_fails_to_import_is_one_line_and_exit_code_2(command, dsn, tmp_path):
    (tmp_path / "myjobs.py").write_text("import a_module_that_does_not_exist_anywhere\n")
    # The data dir must stay untouched: nothing may start (no embedded server, no migration).
    env = user_env(dsn, DL_PIPELINE_MODULES="myjobs", DL_PORT=str(free_port()))
    proc = await asyncio.to_thread(run, [SCRIPT, *command], tmp_path, env)
    assert proc.returncode == 2, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert lines == ["dataloader: configuration error: DL_PIPELINE_MODULES: cannot import 'myjobs': "
                     "ModuleNotFoundError: No module named 'a_module_that_does_not_exist_anywhere'"], proc.stderr
    assert proc.stdout == ""


async def test_a_module_that_is_missing_is_named(dsn, tmp_path):
    proc = await asyncio.to_thread(run, [SCRIPT, "worker"], tmp_path,
                                   user_env(dsn, DL_PIPELINE_MODULES="myjobs"))
    assert proc.returncode == 2
    assert proc.stderr.strip() == ("dataloader: configuration error: DL_PIPELINE_MODULES: cannot import "
                                   "'myjobs': ModuleNotFoundError: No module named 'myjobs'")


async def test_bare_dataloader_prints_help_and_starts_nothing(tmp_path):
    # An unreachable database: if the bare command started the service, it would fail on it.
    env = user_env("postgresql://nobody@127.0.0.1:1/none", DL_PORT=str(free_port()))
    proc = await asyncio.to_thread(run, [SCRIPT], tmp_path, env, 30)
    assert proc.returncode == 2, proc.stderr  # click's code for a group called without a command
    assert "Usage: dataloader [OPTIONS] COMMAND" in proc.stdout
    for command in ("serve", "worker", "db", "jobs"):
        assert command in proc.stdout
    assert proc.stderr == ""


async def test_bare_python_m_dataloader_runs_the_service(dsn, db, tmp_path):
    port = free_port()
    env = user_env(dsn, DL_PORT=str(port), WORKERS_JSON='[{"queue": "default", "concurrency": 1}]')
    stderr_path = tmp_path / "serve.stderr"
    with stderr_path.open("wb") as stderr:
        proc = await asyncio.create_subprocess_exec(sys.executable, "-m", "dataloader", cwd=tmp_path, env=env,
                                                    stdout=asyncio.subprocess.DEVNULL, stderr=stderr)
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=5) as http:
            async def healthy() -> bool:
                if proc.returncode is not None:
                    raise AssertionError(f"exited early: {stderr_path.read_text()[-3000:]}")
                try:
                    return (await http.get("/health")).status_code == 200
                except httpx.TransportError:
                    return False

            await wait_until(healthy, timeout=30, interval=0.1, message="the service to answer /health")
        proc.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(proc.wait(), timeout=30) == 0, stderr_path.read_text()[-3000:]
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()


async def test_python_m_dataloader_with_arguments_is_the_cli(dsn, db: asyncpg.Pool, tmp_path):
    proc = await asyncio.to_thread(run, [sys.executable, "-m", "dataloader", "jobs", "status",
                                         "00000000-0000-0000-0000-000000000000"], tmp_path, user_env(dsn))
    assert proc.returncode == 1
    assert "job_not_found" in proc.stderr
