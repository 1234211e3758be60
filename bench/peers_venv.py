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


def _own_venv(venv: Path, requirements: list[str], distributions: list[str], upgrade: bool) -> dict[str, str]:
    """A peer's own venv with `requirements` installed (latest), made if missing; the installed
    versions of `distributions`."""
    python = venv / "bin" / "python"
    code = ("import json, importlib.metadata as m; "
            f"print(json.dumps({{d: m.version(d) for d in {distributions!r}}}))")
    if python.exists() and not upgrade:
        try:
            out = subprocess.run([str(python), "-c", code], check=True, capture_output=True, text=True)
            return json.loads(out.stdout)
        except subprocess.CalledProcessError:
            pass  # a half-made venv: (re)install below
    if not python.exists():
        print(f"bench: creating {venv}", flush=True)
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    subprocess.run([str(python), "-m", "pip", "install", "--quiet", "--upgrade", *requirements], check=True)
    out = subprocess.run([str(python), "-c", code], check=True, capture_output=True, text=True)
    return json.loads(out.stdout)


# DBOS Transact (`python -m bench workflows`) in a venv of its own (bench/.dbos-venv, gitignored):
# it brings SQLAlchemy and its own psycopg pin, which must not move the queue peers' versions.
DBOS_VENV = BENCH_DIR / ".dbos-venv"
DBOS_PYTHON = DBOS_VENV / "bin" / "python"
DBOS_REQUIREMENTS = ["dbos", "psutil"]
DBOS_DISTRIBUTIONS = ["dbos", "psycopg", "sqlalchemy"]


def ensure_dbos(upgrade: bool = False) -> dict[str, str]:
    """Create bench/.dbos-venv with the latest `dbos` if needed; return the installed versions."""
    return _own_venv(DBOS_VENV, DBOS_REQUIREMENTS, DBOS_DISTRIBUTIONS, upgrade)


# Absurd (`python -m bench workflows --systems ...,absurd`) in bench/.absurd-venv (gitignored): its
# SDK (`absurd-sdk`, psycopg 3) and its CLI (`absurdctl`, which carries the schema's SQL and applies
# it with `psql`).
ABSURD_VENV = BENCH_DIR / ".absurd-venv"
ABSURD_PYTHON = ABSURD_VENV / "bin" / "python"
ABSURD_REQUIREMENTS = ["absurd-sdk", "absurdctl"]
ABSURD_DISTRIBUTIONS = ["absurd-sdk", "absurdctl", "psycopg"]


def ensure_absurd(upgrade: bool = False) -> dict[str, str]:
    """Create bench/.absurd-venv with the latest `absurd-sdk` and `absurdctl` if needed; return the
    installed versions."""
    return _own_venv(ABSURD_VENV, ABSURD_REQUIREMENTS, ABSURD_DISTRIBUTIONS, upgrade)
