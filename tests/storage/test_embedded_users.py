"""The embedded server on a shared machine: a fresh machine as root with many processes starting at
once, a normal user after root used it, root on a normal user's data directory, and every way a data
directory cannot be used answered in one line (issue: "The first hour, on any machine").

Each case ran against the wheel's own server manager before it was replaced: `initdb: could not look
up effective user ID` when xdist workers raced on `useradd pgserver`; `PermissionError ...
/tmp/.lockfile` for a normal user after root; root's `chown` of another user's data directory."""

from __future__ import annotations

import json
import os
import pwd
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from tests.conftest import ROOT
from tests.support.os_users import (
    owner,
    remove_user,
    require_root,
    run_as,
    start_as,
    throwaway_name,
    throwaway_user,
)

pytestmark = pytest.mark.process  # embedded servers, commands and users' processes are real processes

# A process holding the embedded server of argv[1] (as OS user argv[2] when root): it starts on "go",
# says what it reached, and leaves at EOF of its stdin.
HOLDER = """
import asyncio, json, sys
import asyncpg
from dataloader.storage.embedded import EmbeddedPostgres
sys.stdin.readline()
server = EmbeddedPostgres(sys.argv[1], os_user=sys.argv[2])
dsn = server.start()
async def ask():
    conn = await asyncpg.connect(dsn)
    try:
        return await conn.fetchval("SELECT current_setting('data_directory')")
    finally:
        await conn.close()
print(json.dumps({"dsn": dsn, "data_directory": asyncio.run(ask())}), flush=True)
sys.stdin.read()
print(json.dumps({"stopped": server.stop()}), flush=True)
"""


def base_dir() -> Path:
    base = Path(tempfile.mkdtemp(prefix="dl-test-users-"))
    base.chmod(0o755)  # the server's user (not root) must enter it
    return base


def holder(data_dir: Path, os_user: str = "dataloader") -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-c", HOLDER, str(data_dir), os_user], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT)


def reached(proc: subprocess.Popen[str]) -> dict:
    line = proc.stdout.readline()  # type: ignore[union-attr]
    assert line, f"the holder ended: {proc.stderr.read()[-3000:]}"  # type: ignore[union-attr]
    return json.loads(line)


def leave(proc: subprocess.Popen[str]) -> bool:
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err[-3000:]
    return json.loads(out.splitlines()[-1])["stopped"]


def cli_env(**settings: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DL_", "WORKERS_JSON"))}
    env.update({"DL_LOG_FORMAT": "json", "DL_LOG_LEVEL": "INFO", "PYTHONPATH": str(ROOT), **settings})
    return env


def dataloader(*args: str, **settings: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "dataloader", *args], env=cli_env(**settings), capture_output=True,
                          text=True, timeout=120)


def one_line(proc: subprocess.CompletedProcess[str]) -> str:
    lines = [line for line in proc.stderr.splitlines() if line.startswith("dataloader:")]
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    return lines[0]


def test_many_processes_start_at_once_as_root_when_the_os_user_does_not_exist():
    """Six processes on three fresh data directories, released at once, on a machine without the
    server's OS user: every one starts and reaches its own server, the user is made once."""
    require_root()
    name = throwaway_name()
    base = base_dir()
    dirs = [base / f"pgdata{i}" for i in range(3)]
    procs = [holder(data_dir, name) for data_dir in dirs for _ in range(2)]
    try:
        with pytest.raises(KeyError):
            pwd.getpwnam(name)
        for proc in procs:  # released together: every start finds the user missing
            proc.stdin.write("go\n")  # type: ignore[union-attr]
            proc.stdin.flush()  # type: ignore[union-attr]
        answers = [reached(proc) for proc in procs]
        assert [Path(a["data_directory"]) for a in answers] == [d for d in dirs for _ in range(2)]
        account = pwd.getpwnam(name)
        for data_dir in dirs:
            assert data_dir.stat().st_uid == account.pw_uid  # root's fresh directory, given to the account
        stopped = [leave(proc) for proc in procs]
        assert stopped.count(True) == 3, stopped  # the last of each pair stops its server
        assert not any((d / "postmaster.pid").exists() for d in dirs)
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
        for data_dir in dirs:
            subprocess.run(["pkill", "-INT", "-f", f"-D {data_dir}"], capture_output=True)
        remove_user(name)
        subprocess.run(["rm", "-rf", str(base)])


def test_a_normal_user_starts_the_service_after_root_used_the_embedded_server():
    """Root starts and stops an embedded server; then a normal user with no XDG_RUNTIME_DIR and no
    TMPDIR (su -, cron, a service) runs a command on the default data directory of its home."""
    base = base_dir()
    try:
        with throwaway_user() as user:
            root_server = holder(base / "pgdata")
            root_server.stdin.write("go\n")  # type: ignore[union-attr]
            root_server.stdin.flush()  # type: ignore[union-attr]
            reached(root_server)
            assert leave(root_server) is True

            done = run_as(user, ["-m", "dataloader", "db", "upgrade"])
            assert done.returncode == 0, done.stderr[-3000:]
            done = run_as(user, ["-m", "dataloader", "jobs", "list"])
            assert done.returncode == 0, done.stderr[-3000:]
            assert json.loads(done.stdout)["jobs"] == []
            data_dir = Path(user.pw_dir) / ".local/share/dataloader/pgdata"
            assert (data_dir / "PG_VERSION").exists() and owner(data_dir) == user.pw_name
            assert not (data_dir / "postmaster.pid").exists()  # stopped when the command left
    finally:
        subprocess.run(["rm", "-rf", str(base)])


def test_root_uses_a_normal_users_running_server_without_taking_its_directory():
    """A user's service holds its server; root runs a command on that data directory: it joins the
    running server as it is (no chown), the user's service goes on working, and when the user leaves
    last, its own process can stop the server (the list of users root rewrote is still the user's)."""
    with throwaway_user() as user:
        data_dir = Path(user.pw_dir) / "pgdata"
        Path(user.pw_dir).chmod(0o755)
        service = start_as(user, ["-c", HOLDER, str(data_dir), "unused"])
        try:
            service.stdin.write("go\n")  # type: ignore[union-attr]
            service.stdin.flush()  # type: ignore[union-attr]
            assert Path(reached(service)["data_directory"]) == data_dir

            listed = dataloader("db", "upgrade", DL_DATA_DIR=str(data_dir))
            assert listed.returncode == 0, listed.stderr[-3000:]
            assert "embedded PostgreSQL left running for its other users" in listed.stderr
            assert owner(data_dir) == user.pw_name
            assert all(owner(path) == user.pw_name for path in data_dir.iterdir()), \
                [(p.name, owner(p)) for p in data_dir.iterdir() if owner(p) != user.pw_name]

            assert leave(service) is True  # the user's process was the last: it stops its server
            assert not (data_dir / "postmaster.pid").exists()
        finally:
            if service.poll() is None:
                service.kill()


def test_a_normal_user_is_refused_another_users_data_directory_in_one_line():
    with throwaway_user() as user:
        base = base_dir()
        try:
            root_server = holder(base / "pgdata")
            root_server.stdin.write("go\n")  # type: ignore[union-attr]
            root_server.stdin.flush()  # type: ignore[union-attr]
            reached(root_server)
            try:
                done = run_as(user, ["-m", "dataloader", "jobs", "list"], env={"DL_DATA_DIR": str(base / "pgdata")})
            finally:
                assert leave(root_server) is True
            assert done.returncode == 2, done.stderr[-3000:]
            line = one_line(done)
            assert line.startswith("dataloader: configuration error: DL_DATA_DIR: ") and "belongs to" in line, line
        finally:
            subprocess.run(["rm", "-rf", str(base)])


def test_root_is_told_when_the_servers_user_cannot_enter_the_data_directory():
    require_root()
    base = Path(tempfile.mkdtemp(prefix="dl-test-closed-"))  # 0700: only root enters
    try:
        done = dataloader("jobs", "list", DL_DATA_DIR=str(base / "pgdata"))
        assert done.returncode == 2, done.stderr[-3000:]
        line = one_line(done)
        assert "DL_DATA_DIR" in line and f"cannot enter {base}" in line, line
        assert owner(base / "pgdata") == "root"  # nothing was handed over: it cannot be used anyway
    finally:
        subprocess.run(["rm", "-rf", str(base)])


def test_a_directory_that_is_not_a_data_directory_is_refused_untouched(tmp_path):
    data_dir = tmp_path / "notes"
    data_dir.mkdir()
    (data_dir / "todo.txt").write_text("mine")
    done = dataloader("jobs", "list", DL_DATA_DIR=str(data_dir))
    assert done.returncode == 2, done.stderr[-3000:]
    line = one_line(done)
    assert "DL_DATA_DIR" in line and "neither empty nor a PostgreSQL data directory" in line, line
    assert [p.name for p in data_dir.iterdir()] == ["todo.txt"] and owner(data_dir) == owner(tmp_path)


def test_a_server_that_does_not_start_says_its_own_reason():
    """Not `database_unavailable`: the server's FATAL line and where its log is, exit 1."""
    base = base_dir()
    data_dir = base / "pgdata"
    try:
        assert dataloader("db", "upgrade", DL_DATA_DIR=str(data_dir)).returncode == 0  # made and stopped
        with (data_dir / "postgresql.conf").open("a") as conf:
            conf.write("\nshared_buffers = 'plenty'\n")
        done = dataloader("jobs", "list", DL_DATA_DIR=str(data_dir))
        assert done.returncode == 1, done.stderr[-3000:]
        line = one_line(done)
        assert line.startswith("dataloader: embedded_server_failed: "), line
        assert "shared_buffers" in line and str(data_dir / "log") in line, line
    finally:
        subprocess.run(["rm", "-rf", str(base)])
