"""The CLI run in-process with typer's CliRunner: no interpreter start per call, so a table of
inputs stays quick on a small CI machine (`run` answers as subprocess.run does, for tests written
against a real process; each command group keeps one real-process test).

`invoke` gives the command a clean environment (no DL_* of the caller; DL_DATA_DIR always points at
a scratch directory, so nothing can touch a user's default data directory), restores the root
logger the command reconfigured, and turns the os._exit of `serve`/`worker` into SystemExit so a
command that starts when it should not ends the test, not the test process."""

from __future__ import annotations

import logging
import os
import subprocess
import tempfile
import traceback
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from dataloader import cli
from dataloader.cli import observers, processes, service

# Every module of the CLI package that calls os._exit through `_exit` (its own imported name).
EXITING_MODULES = (service, observers, processes)

SCRATCH_DATA_DIR = Path(tempfile.gettempdir()) / "dataloader-cli-tests" / "never-started"


def invoke(args: list[str], env: Mapping[str, str] | None = None, input: str | None = None) -> Any:
    """typer.testing's Result of `dataloader <args>` (`input`: what its stdin holds)."""
    clean: dict[str, str | None] = {k: None for k in os.environ if k.startswith(("DL_", "WORKERS_JSON"))}
    clean.update({"DL_DATA_DIR": str(SCRATCH_DATA_DIR), "DL_LOG_FORMAT": "json"})
    clean.update(env or {})
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level

    def no_os_exit(code: int) -> None:
        raise SystemExit(code)

    with pytest.MonkeyPatch.context() as patch:
        for module in EXITING_MODULES:
            patch.setattr(module, "_exit", no_os_exit)
        try:
            return CliRunner().invoke(cli.app, args, env=clean, input=input)
        finally:
            root.handlers[:] = handlers
            root.setLevel(level)


def error_line(result: Any) -> str:
    """The one line a failed command prints (its `dataloader: ...` line; logs are JSON lines)."""
    lines = [line for line in result.stderr.splitlines() if line.startswith("dataloader:")]
    assert len(lines) == 1, result.stderr
    assert "Traceback" not in result.output, result.output
    return lines[0]


def run(args: list[str], env: Mapping[str, str], input: str | None = None) -> subprocess.CompletedProcess[str]:
    """`dataloader <args>` in-process, answered as `subprocess.run` answers (returncode, stdout, stderr),
    for a test whose subprocess added nothing but an interpreter start. `env` is a subprocess's
    environment (`subprocess_env`): only its DL_* and WORKERS_JSON reach the command. The command runs
    its own event loop, so it runs in a thread of its own; the caller waits for it, as it waited for
    the subprocess. An exception that escapes the command is its traceback on stderr and exit code 1,
    as in a real process."""
    settings = {k: v for k, v in env.items() if k.startswith(("DL_", "WORKERS_JSON"))}
    with ThreadPoolExecutor(1) as pool:
        result = pool.submit(invoke, args, settings, input).result()
    stderr = result.stderr
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        stderr += "".join(traceback.format_exception(result.exception))
    return subprocess.CompletedProcess(["dataloader", *args], result.exit_code, result.stdout, stderr)
