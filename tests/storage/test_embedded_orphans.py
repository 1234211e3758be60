"""The embedded PostgreSQL never outlives its owners (issue 24): after `kill -9` of the process that
started it, its watchdog stops it; when the watchdog is killed too, the next start adopts the
orphan (drops the dead pid from pgserver's list) and stops it when it leaves."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from tests.conftest import ROOT, wait_until
from tests.support.cli import invoke

pytestmark = pytest.mark.process  # embedded servers, their owners and watchdogs as real processes


def running_server(data_dir: Path) -> bool:
    """A live postmaster on `data_dir` (a killed one may linger as a zombie where nothing reaps)."""
    if not (data_dir / "postmaster.pid").exists():
        return False
    for proc in psutil.process_iter(attrs=("name", "cmdline", "status")):
        if (proc.info["name"] == "postgres" and proc.info["status"] != psutil.STATUS_ZOMBIE
                and str(data_dir) in " ".join(proc.info["cmdline"] or [])):
            return True
    return False


def users(data_dir: Path) -> list[int]:
    try:
        return json.loads((data_dir / ".handle_pids.json").read_text() or "[]")
    except FileNotFoundError:
        return []


def start_worker(data_dir: Path, log: Path) -> subprocess.Popen[bytes]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DL_", "WORKERS_JSON"))}
    env.update({"DL_DATA_DIR": str(data_dir), "DL_LOG_FORMAT": "json", "WORKERS_JSON": '[{"queue": "orphans"}]',
                "PYTHONPATH": str(ROOT)})
    with log.open("wb") as out:
        return subprocess.Popen([sys.executable, "-m", "dataloader", "worker"], env=env, stdout=out, stderr=out)


def start_command(args: list[str], env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    with log.open("wb") as out:
        return subprocess.Popen([sys.executable, "-m", "dataloader", *args], env=env, stdout=subprocess.DEVNULL,
                                stderr=out)


def dead(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE  # killed, not reaped (yet)
    except psutil.NoSuchProcess:
        return True


async def kill(pid: int) -> None:
    os.kill(pid, signal.SIGKILL)
    await wait_until(lambda: dead(pid), timeout=10, message=f"pid {pid} to die")


def stop_server(data_dir: Path) -> None:
    """Whatever the test's outcome, no server of its data directory is left running."""
    if running_server(data_dir):
        os.kill(int((data_dir / "postmaster.pid").read_text().split()[0]), signal.SIGINT)  # fast shutdown


async def test_a_killed_owner_leaves_no_server_behind(tmp_path, server_dir):
    data_dir = server_dir / "pgdata"
    try:
        await _kill_owners_and_watch(data_dir, tmp_path / "worker.log")
    finally:
        stop_server(data_dir)


async def _kill_owners_and_watch(data_dir: Path, log: Path) -> None:

    def started(worker: subprocess.Popen[bytes]) -> bool:
        assert worker.poll() is None, log.read_text()[-3000:]
        return worker.pid in users(data_dir) and running_server(data_dir)

    # kill -9 of the owner: its watchdog stops the server
    worker = start_worker(data_dir, log)
    await wait_until(lambda: started(worker), timeout=120, interval=0.1, message="the worker's server")
    await kill(worker.pid)
    worker.wait()
    await wait_until(lambda: not running_server(data_dir), timeout=60, interval=0.1,
                     message="the watchdog to stop the server")
    assert worker.pid not in users(data_dir)

    # kill -9 of the owner and of its watchdog: the server is an orphan, as before the fix...
    worker = start_worker(data_dir, log)
    await wait_until(lambda: started(worker), timeout=120, interval=0.1, message="the worker's server")
    watchdogs = [c for c in psutil.Process(worker.pid).children() if "dl_embedded" in " ".join(c.cmdline())]
    assert len(watchdogs) == 1, [c.cmdline() for c in psutil.Process(worker.pid).children()]
    await kill(watchdogs[0].pid)
    await kill(worker.pid)
    worker.wait()
    assert running_server(data_dir) and worker.pid in users(data_dir)
    # ...until the next start adopts it and stops it when it leaves
    result = await asyncio.to_thread(invoke, ["jobs", "list"], {"DL_DATA_DIR": str(data_dir)})
    assert result.exit_code == 0, result.output
    assert not running_server(data_dir)
    assert users(data_dir) == []


async def test_a_cli_command_stopped_by_sigterm_closes_and_stops_its_server(tmp_path, server_dir):
    """`timeout` (SIGTERM) of a command: the command itself closes its App and stops the server it
    started (exit 143), not only its watchdog after it died."""
    data_dir = server_dir / "pgdata"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DL_", "WORKERS_JSON"))}
    env.update({"DL_DATA_DIR": str(data_dir), "DL_LOG_FORMAT": "json", "DL_LOG_LEVEL": "INFO",
                "PYTHONPATH": str(ROOT)})

    def cli(*args: str) -> dict:
        proc = subprocess.run([sys.executable, "-m", "dataloader", *args], env=env, capture_output=True, text=True,
                              timeout=120)
        assert proc.returncode == 0, proc.stderr
        return json.loads(proc.stdout)

    try:
        cli("jobs", "trigger", "--task", "dl.noop", "--queue", "never-served")
        # No runner works it in a CLI process: the operation stays running and `ops watch` waits on.
        op = cli("ops", "cancel", "--queue", "never-served", "--yes", "--no-watch")
        log = tmp_path / "watch.log"
        watch = start_command(["ops", "watch", op["operation_id"]], env, log)
        await wait_until(lambda: watch.pid in users(data_dir) and running_server(data_dir), timeout=120,
                         interval=0.1, message="ops watch on the embedded server")
        watch.send_signal(signal.SIGTERM)
        assert await asyncio.to_thread(watch.wait, 60) == 143
        said = log.read_text()
        assert "dataloader: stopped by SIGTERM" in said and "embedded PostgreSQL stopped" in said, said[-3000:]
        assert not running_server(data_dir) and users(data_dir) == []
    finally:
        stop_server(data_dir)
