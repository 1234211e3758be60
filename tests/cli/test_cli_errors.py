"""The CLI's one answer to an error (issue 24, docs/errors.md): one line `dataloader: <code>: ...`,
exit code 2 for bad input or configuration and 1 for a failed operation, never a traceback unless
--debug; `serve` says the same in one log line and exits with the same code (not uvicorn's 3)."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from typing import Any

import pytest

from dataloader.exceptions import DatabaseUnavailable
from tests.cli.test_cli import free_port
from tests.support.cli import error_line, invoke

UNREACHABLE = "postgresql://postgres@127.0.0.1:1/nowhere"  # port 1: refused at once


@pytest.mark.parametrize(("command", "env", "variable"), [
    (["jobs", "list"], {"DL_DB_DSN": "mysql://x/y"}, "DL_DB_DSN"),
    (["worker"], {"DL_DB_DSN": UNREACHABLE, "DL_NODE_DEAD_AFTER_SEC": "1"}, "DL_NODE_DEAD_AFTER_SEC"),
    (["serve"], {"DL_DB_DSN": UNREACHABLE, "DL_NODE_DEAD_AFTER_SEC": "1"}, "DL_NODE_DEAD_AFTER_SEC"),
    (["jobs", "list"], {"DL_DATA_DIR": "/proc/nope/pgdata"}, "DL_DATA_DIR"),
])
def test_bad_configuration_is_one_line_naming_the_variable_and_exit_code_2(command, env, variable):
    result = invoke(command, env)
    assert result.exit_code == 2, result.output
    assert error_line(result).startswith(f"dataloader: configuration error: {variable}: "), result.stderr


def test_an_unreachable_database_is_one_line_and_exit_code_1():
    result = invoke(["jobs", "list"], {"DL_DB_DSN": UNREACHABLE})
    assert result.exit_code == 1, result.output
    line = error_line(result)
    assert line.startswith("dataloader: database_unavailable: cannot reach the database at "), line
    assert "127.0.0.1:1" in line


def test_debug_shows_the_error_itself():
    result = invoke(["--debug", "jobs", "list"], {"DL_DB_DSN": UNREACHABLE})
    assert isinstance(result.exception, DatabaseUnavailable)


def test_version():
    from dataloader import __version__

    result = invoke(["--version"])
    assert result.exit_code == 0 and result.stdout.strip() == f"dataloader {__version__}"


def _serve(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("DL_", "WORKERS_JSON"))}
    base.pop("XDG_RUNTIME_DIR", None)  # where platformdirs warns: the warning must not reach stderr
    return subprocess.run([sys.executable, "-m", "dataloader", "serve", "--port", str(free_port())],
                          env={**base, "DL_LOG_FORMAT": "json", **env}, capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize(("env", "code", "start"), [
    ({"DL_DATA_DIR": "/proc/nope/pgdata"}, 2, "start-up failed: configuration error: DL_DATA_DIR: "),
    ({"DL_DB_DSN": UNREACHABLE}, 1, "start-up failed: database_unavailable: cannot reach the database at "),
])
@pytest.mark.process  # runs `dataloader serve`
async def test_serve_that_cannot_start_logs_one_line_and_exits_with_the_clis_code(env, code, start):
    import json

    proc = await asyncio.to_thread(_serve, env)
    assert proc.returncode == code, proc.stderr
    assert "Traceback" not in proc.stderr and "RuntimeDirWarning" not in proc.stderr, proc.stderr
    lines = [json.loads(line) for line in proc.stderr.splitlines()]  # every line a JSON log line
    errors = [line["message"] for line in lines if line["level"] == "error"]
    assert errors[0].startswith(start), errors


@pytest.mark.process  # runs the CLI through a pipe
def test_help_through_a_pipe_is_not_cut_at_80_columns():
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "TERMINAL_WIDTH")}
    proc = subprocess.run([sys.executable, "-m", "dataloader", "jobs", "trigger", "--help"], env=env,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert max(len(line) for line in proc.stdout.splitlines()) > 100
    assert "Jobs with the same lock_key never run at once (default: the" in proc.stdout  # one line, not slivers


def _commands(group: Any, path: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    import click

    found = [path]
    if isinstance(group, click.Group):
        for name, command in group.commands.items():
            found += _commands(command, (*path, name))
    return found


def test_a_flag_shows_no_value_type_in_help():
    """`--debug` is a flag, not `--debug <bool>` (issue 34): no flag of any command shows a type."""
    import typer

    from dataloader import cli

    for path in _commands(typer.main.get_command(cli.app)):
        result = invoke([*path, "--help"], env={"COLUMNS": "200"})
        assert result.exit_code == 0, (path, result.output)
        flags = [line for line in result.output.splitlines() if "<bool>" in line]
        assert not flags, (path, flags)
