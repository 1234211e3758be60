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


# DBOS Transact (`python -m bench workflows`) in a venv of its own (bench/.dbos-venv, gitignored):
# it brings SQLAlchemy and its own psycopg pin, which must not move the queue peers' versions.
DBOS_VENV = BENCH_DIR / ".dbos-venv"
DBOS_PYTHON = DBOS_VENV / "bin" / "python"
DBOS_REQUIREMENTS = ["dbos", "psutil"]
DBOS_DISTRIBUTIONS = ["dbos", "psycopg", "sqlalchemy"]


def ensure_dbos(upgrade: bool = False) -> dict[str, str]:
    """Create bench/.dbos-venv with the latest `dbos` if needed; return the installed versions."""
    code = ("import json, importlib.metadata as m; "
            f"print(json.dumps({{d: m.version(d) for d in {DBOS_DISTRIBUTIONS!r}}}))")
    if DBOS_PYTHON.exists() and not upgrade:
        try:
            out = subprocess.run([str(DBOS_PYTHON), "-c", code], check=True, capture_output=True, text=True)
            return json.loads(out.stdout)
        except subprocess.CalledProcessError:
            pass
    if not DBOS_PYTHON.exists():
        print(f"bench: creating {DBOS_VENV} for DBOS", flush=True)
        subprocess.run([sys.executable, "-m", "venv", str(DBOS_VENV)], check=True)
    subprocess.run([str(DBOS_PYTHON), "-m", "pip", "install", "--quiet", "--upgrade", *DBOS_REQUIREMENTS], check=True)
    out = subprocess.run([str(DBOS_PYTHON), "-c", code], check=True, capture_output=True, text=True)
    return json.loads(out.stdout)
