"""What a benchmark handler records, shared by every system's driver (stdlib only).

A "mark" handler appends one line `key start end pid` (Unix-epoch seconds from `time.time()`)
to a per-process file in $BENCH_MARKS_DIR. One `os.write` on an O_APPEND descriptor per job: no
buffering to flush at shutdown, and no database round trip that would slow the system under test
differently from the others. The harness reads the files after the run.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

_fd: int | None = None


def _marks_fd() -> int:
    global _fd
    if _fd is None:
        directory = os.environ["BENCH_MARKS_DIR"]
        _fd = os.open(os.path.join(directory, f"marks-{os.getpid()}.txt"),
                      os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    return _fd


def record(key: str, started: float, ended: float | None = None) -> None:
    """Write one mark; `started` should be taken as the handler's first statement."""
    ended = time.time() if ended is None else ended
    os.write(_marks_fd(), f"{key} {started:.6f} {ended:.6f} {os.getpid()}\n".encode())


def read_marks(directory: Path) -> dict[str, tuple[float, float, int]]:
    """All marks of a run: key -> (start, end, pid). A key seen twice keeps its first start
    (a re-run after a lost lease would show up as a duplicate, which callers may count)."""
    marks: dict[str, tuple[float, float, int]] = {}
    for path in sorted(directory.glob("marks-*.txt")):
        for line in path.read_text().splitlines():
            parts = line.split()
            if len(parts) != 4:
                continue  # a torn last line of a killed process
            key, start, end, pid = parts[0], float(parts[1]), float(parts[2]), int(parts[3])
            if key not in marks or start < marks[key][0]:
                marks[key] = (start, end, pid)
    return marks


def count_lines(directory: Path) -> int:
    return sum(len(p.read_bytes().splitlines()) for p in directory.glob("marks-*.txt"))
