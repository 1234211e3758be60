"""Subprocesses of the harness: driver calls with a time limit, long-running workers, and the
guarantee that none of them outlives the harness (each runs in its own session, so its whole
process group is signalled, children included)."""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import json
import os
import signal
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil

_live: dict[int, asyncio.subprocess.Process] = {}


class DriverError(RuntimeError):
    pass


def _signal_group(pid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, sig)


def kill_all() -> None:
    """Last resort at exit (also on Ctrl-C): SIGKILL every process group we started."""
    for pid in list(_live):
        _signal_group(pid, signal.SIGKILL)
    _live.clear()


atexit.register(kill_all)


async def spawn(argv: Sequence[str], env: dict[str, str], log: Path) -> asyncio.subprocess.Process:
    """Start a long-running process with stdout+stderr to `log`."""
    with log.open("ab") as out:
        proc = await asyncio.create_subprocess_exec(
            *argv, env=env, stdin=asyncio.subprocess.DEVNULL, stdout=out, stderr=out,
            start_new_session=True)
    _live[proc.pid] = proc
    return proc


async def stop(proc: asyncio.subprocess.Process, grace: float = 10.0) -> int | None:
    """SIGTERM (a graceful stop for every system), SIGKILL after `grace` seconds."""
    if proc.returncode is None:
        _signal_group(proc.pid, signal.SIGTERM)
        try:
            await asyncio.wait_for(proc.wait(), grace)
        except TimeoutError:
            _signal_group(proc.pid, signal.SIGKILL)
            await proc.wait()
    # Children a worker may have left (none expected) go with the group.
    _signal_group(proc.pid, signal.SIGKILL)
    _live.pop(proc.pid, None)
    return proc.returncode


async def run_json(argv: Sequence[str], env: dict[str, str], timeout: float, log: Path) -> dict[str, Any]:
    """Run a driver action to completion; its last stdout line is a JSON object."""
    proc = await asyncio.create_subprocess_exec(
        *argv, env=env, stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE, start_new_session=True)
    _live[proc.pid] = proc
    try:
        out, err = await asyncio.wait_for(proc.communicate(), timeout)
    except TimeoutError:
        await stop(proc, grace=2)
        raise DriverError(f"timed out after {timeout:.0f} s: {' '.join(argv[1:3])}") from None
    finally:
        _live.pop(proc.pid, None)
    with log.open("ab") as f:
        f.write(b"$ " + " ".join(argv).encode() + b"\n" + err)
    if proc.returncode != 0:
        tail = err.decode(errors="replace").strip().splitlines()[-8:]
        raise DriverError(f"{' '.join(argv[1:3])} exited {proc.returncode}: " + " | ".join(tail))
    lines = out.decode().strip().splitlines()
    if not lines:
        raise DriverError(f"{' '.join(argv[1:3])} printed nothing")
    return json.loads(lines[-1])


def _tree(pids: Sequence[int]) -> list[psutil.Process]:
    """These processes (those still alive) and all their descendants."""
    found = []
    for pid in pids:
        try:
            root = psutil.Process(pid)
            found.extend([root, *root.children(recursive=True)])
        except psutil.NoSuchProcess:
            continue
    return found


def tree_rss(pids: Sequence[int]) -> int:
    """Resident memory of these processes and all their descendants, in bytes."""
    total = 0
    for p in _tree(pids):
        with contextlib.suppress(psutil.NoSuchProcess, psutil.AccessDenied):
            total += p.memory_info().rss
    return total


def tree_cpu(pids: Sequence[int]) -> dict[int, float]:
    """CPU seconds (user + system) so far of these processes and all their descendants, by pid."""
    return cpu_seconds(p.pid for p in _tree(pids))


def cpu_seconds(pids: Iterable[int]) -> dict[int, float]:
    """CPU seconds (user + system) so far of each process still alive (any user's: /proc is readable)."""
    seconds = {}
    for pid in pids:
        with contextlib.suppress(psutil.NoSuchProcess, psutil.AccessDenied):
            times = psutil.Process(pid).cpu_times()
            seconds[pid] = times.user + times.system
    return seconds


@dataclass
class Deadline:
    seconds: float

    def __post_init__(self) -> None:
        self.at = time.monotonic() + self.seconds

    @property
    def left(self) -> float:
        return self.at - time.monotonic()

    @property
    def passed(self) -> bool:
        return self.left <= 0
