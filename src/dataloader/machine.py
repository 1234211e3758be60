"""Which machine and process namespace this process runs in, and whether a pid there still runs.

A node restarted after kill -9 (systemd, a supervisor, a benchmark) finds its previous
incarnation's row in `dl_nodes` with the old pid. When that row was written in this same process
namespace of this same boot, the old pid can be asked directly: if no process has it, the old
node is certainly gone, and its jobs can be taken back now instead of when their leases run out
(jobs/reaper.py). Anything less certain answers "running" and leaves the lease to decide: a pid
namespace is the boot's id and the namespace's inode, so two containers with the same host name
never judge each other's pids.
"""

from __future__ import annotations

import os
from functools import cache
from pathlib import Path


@cache
def process_namespace() -> str | None:
    """`<boot id>/<pid namespace>` on Linux; None where either cannot be read."""
    try:
        boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
        namespace = os.readlink("/proc/self/ns/pid")
    except OSError:
        return None
    return f"{boot}/{namespace}" if boot and namespace else None


def pid_running(pid: int) -> bool:
    """False only when no process (or only a zombie) has `pid` in this namespace."""
    if pid <= 0:
        return True  # not a pid this process could judge
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True  # someone else's process (EPERM): running
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    # the state follows the command name, which is in parentheses and may contain any character
    return stat[stat.rfind(")") + 2:][:1] != "Z"
