"""The checkout's own bytecode, written once per run before any worker starts.

Where PYTHONDONTWRITEBYTECODE is set (this project's VMs set it, as do many CI and container
images), Python never caches the compiled form of src/ and tests/: every process the suite starts
(each xdist worker, each `dataloader worker` node, each CLI run) compiled some 300 modules again,
about 0.4 s of CPU per start (1.47 → 1.09 s to import `dataloader.cli`, measured), and the suite
starts hundreds. An installed wheel gets its bytecode from pip; an editable checkout gets none.
`compileall` writes it whatever the flag says (about 1.7 s of CPU for src, tests and bench), and
imports read it whatever the flag says; a stale file is recompiled in memory as usual.

pytest's own cache of the test modules it rewrites for its assertions obeys the flag too: each
xdist worker parsed and rewrote every test module again at its collection (27 s of CPU per
collection with the flag, 11 s with the cache). `allow_pytest_cache` lifts the flag in this
process only, before collection, so the rewritten modules are cached once and read after."""

from __future__ import annotations

import compileall
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def write_once() -> None:
    for folder in ("src", "tests", "bench"):
        compileall.compile_dir(ROOT / folder, quiet=1)


def allow_pytest_cache() -> None:
    sys.dont_write_bytecode = False
