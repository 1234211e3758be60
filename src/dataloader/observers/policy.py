"""The pure decisions of observers, kept apart so unit tests check them without a database:
a node's default capacity, the restart delay after a crash, and the self-fencing deadline."""

from __future__ import annotations

import os

# What one idle observer is budgeted on a node: a task (or thread), a socket, buffers.
MEMORY_PER_OBSERVER_BYTES = 64 * 1024 * 1024
OBSERVERS_PER_CPU = 25


def machine_capacity(cpus: int | None = None, memory_bytes: int | None = None) -> int:
    """Seed 004: "set in the configuration or computed from the server (cores, RAM)". Observers
    mostly wait on I/O, so cores allow many; memory is the bound that usually bites."""
    cpus = cpus if cpus is not None else (os.cpu_count() or 1)
    if memory_bytes is None:
        try:
            memory_bytes = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        except (ValueError, OSError, AttributeError):
            memory_bytes = 4 * 1024**3
    return max(1, min(cpus * OBSERVERS_PER_CPU, memory_bytes // MEMORY_PER_OBSERVER_BYTES))


def restart_delay(failures: int, base_sec: float, cap_sec: float) -> float:
    """Seconds before the restart after the `failures`-th crash in a row: base × 2^(n-1), capped."""
    if failures < 1:
        return 0.0
    return min(cap_sec, base_sec * 2 ** min(failures - 1, 60))


def failures_after_crash(previous: int, ran_sec: float, healthy_after_sec: float) -> int:
    """The crash count in a row after one more crash: a run longer than `healthy_after_sec` ended
    the previous streak."""
    return 1 if ran_sec >= healthy_after_sec else previous + 1


def gives_up(failures: int, max_restarts: int | None) -> bool:
    """`max_restarts` restarts are allowed; the crash after them leaves the observer failed."""
    return max_restarts is not None and failures > max_restarts


def fence_after(dead_after_sec: float, stop_grace_sec: float, heartbeat_sec: float) -> float:
    """How long after the start of its last successful heartbeat a node may keep running
    observers. Any other node releases them no earlier than `dead_after_sec` after that heartbeat
    (the database stamps it after the node sent it), so stopping at this point — and forcing the
    stop within `stop_grace_sec` — leaves a heartbeat period of margin: never two copies."""
    return dead_after_sec - stop_grace_sec - heartbeat_sec
