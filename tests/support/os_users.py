"""Throwaway OS users for the tests of the embedded server on a shared machine (root only): a user is
created for one test and removed with every process it left."""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import subprocess
import sys
import sysconfig
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import ROOT


def require_root() -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root: it creates and removes OS users")


def throwaway_name() -> str:
    return f"dlt{uuid.uuid4().hex[:8]}"


def remove_user(name: str) -> None:
    """The user, its processes, its home and its group, gone (also when the test failed half-way)."""
    subprocess.run(["pkill", "-KILL", "-u", name], capture_output=True)
    subprocess.run(["userdel", "--remove", name], capture_output=True)
    subprocess.run(["groupdel", name], capture_output=True)


@contextlib.contextmanager
def throwaway_user() -> Iterator[pwd.struct_passwd]:
    """A normal user with a home directory, for the length of a test."""
    require_root()
    name = throwaway_name()
    subprocess.run(["useradd", "--create-home", "--shell", "/bin/sh", name], check=True, capture_output=True)
    try:
        yield pwd.getpwnam(name)
    finally:
        remove_user(name)


def _user_env(user: pwd.struct_passwd, python_path: str | None) -> dict[str, str]:
    """A login-like environment: no XDG_RUNTIME_DIR and no TMPDIR (as under `su -`, cron or a service),
    where the wheel's server manager fell back to one lock file in /tmp for the whole machine."""
    env = {"HOME": user.pw_dir, "USER": user.pw_name, "LOGNAME": user.pw_name, "PATH": "/usr/bin:/bin",
           "LANG": "C.UTF-8", "PYTHONUNBUFFERED": "1", "DL_LOG_FORMAT": "json"}
    if python_path:
        env["PYTHONPATH"] = python_path
    return env


def python_for(user: pwd.struct_passwd) -> tuple[str, str | None]:
    """An interpreter `user` can run with this checkout's dataloader and its dependencies importable:
    this run's own, or (when it lies below a directory only root may enter, e.g. pyenv in /root) the
    system's python of the same version over this run's site-packages. Skips when neither works."""
    site = sysconfig.get_paths()["purelib"]
    here = os.pathsep.join([str(ROOT / "src"), str(ROOT), site])
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    candidates = [(sys.executable, str(ROOT)), (shutil.which(version, path="/usr/bin:/bin") or "", here)]
    for executable, python_path in candidates:
        if not executable:
            continue
        try:
            probe = subprocess.run([executable, "-c", "import dataloader, asyncpg, psutil"], capture_output=True,
                                   text=True, env=_user_env(user, python_path), cwd=user.pw_dir, user=user.pw_uid,
                                   group=user.pw_gid, extra_groups=[], timeout=60)
        except PermissionError:  # the interpreter itself lies where the user may not go
            continue
        if probe.returncode == 0:
            return executable, python_path
    pytest.skip(f"no interpreter with this checkout is usable by another user ({sys.executable} and {ROOT} "
                f"lie below directories only root may enter)")


def run_as(user: pwd.struct_passwd, args: list[str], *, env: dict[str, str] | None = None,
           timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """`python <args>` as `user` in its home directory."""
    executable, python_path = python_for(user)
    return subprocess.run([executable, *args], capture_output=True, text=True, timeout=timeout,
                          env={**_user_env(user, python_path), **(env or {})}, cwd=user.pw_dir,
                          user=user.pw_uid, group=user.pw_gid, extra_groups=[])


def start_as(user: pwd.struct_passwd, args: list[str], *, env: dict[str, str] | None = None,
             ) -> subprocess.Popen[str]:
    """`python <args>` as `user`, running on (stdin and stdout are pipes)."""
    executable, python_path = python_for(user)
    return subprocess.Popen([executable, *args], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env={**_user_env(user, python_path), **(env or {})},
                            cwd=user.pw_dir, user=user.pw_uid, group=user.pw_gid, extra_groups=[])


def owner(path: Path) -> str:
    return pwd.getpwuid(path.stat().st_uid).pw_name
