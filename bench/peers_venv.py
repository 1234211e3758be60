"""The peers' own virtualenv (bench/.peers-venv, gitignored), created on first use.

The peers never share an interpreter with dataloader, so their dependencies (psycopg, their own
asyncpg pin, anyio...) cannot change what dataloader runs with, and vice versa.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent
VENV = BENCH_DIR / ".peers-venv"
PYTHON = VENV / "bin" / "python"
# Latest releases from PyPI, plus the drivers each one's public API needs here.
REQUIREMENTS = ["pgqueuer", "procrastinate", "psycopg[binary,pool]", "asyncpg", "psutil", "uvloop"]
DISTRIBUTIONS = ["pgqueuer", "procrastinate", "psycopg", "psycopg-pool", "asyncpg", "uvloop"]


def _versions() -> dict[str, str]:
    code = ("import json, importlib.metadata as m; "
            f"print(json.dumps({{d: m.version(d) for d in {DISTRIBUTIONS!r}}}))")
    out = subprocess.run([str(PYTHON), "-c", code], check=True, capture_output=True, text=True)
    return json.loads(out.stdout)


def ensure(upgrade: bool = False) -> dict[str, str]:
    """Create the venv and install the peers if needed; return their installed versions."""
    if PYTHON.exists() and not upgrade:
        try:
            return _versions()
        except subprocess.CalledProcessError:
            pass  # a half-made venv: (re)install below
    if not PYTHON.exists():
        print(f"bench: creating {VENV} for the peers", flush=True)
        subprocess.run([sys.executable, "-m", "venv", str(VENV)], check=True)
    print(f"bench: installing {' '.join(REQUIREMENTS)} into the peers venv", flush=True)
    subprocess.run([str(PYTHON), "-m", "pip", "install", "--quiet", "--upgrade", *REQUIREMENTS], check=True)
    return _versions()
