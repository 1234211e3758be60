"""A command's output is its answer (issue 34): no INFO lines about the embedded server or the
schema beside it unless `--verbose` or DL_LOG_LEVEL asks; the services (`serve`, `worker`) log at
INFO as services do, and say once which database they use; a port that is taken is one line and
exit code 2 before anything starts."""

from __future__ import annotations

import json
import logging
import socket

import pytest

from dataloader import App, Settings
from tests.support.cli import error_line, invoke


def _log_lines(stderr: str) -> list[dict]:
    return [json.loads(line) for line in stderr.splitlines() if line.startswith("{")]


def test_a_command_prints_its_answer_and_no_info_logs(cli_env):
    result = invoke(["jobs", "list"], env=cli_env)
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["jobs"] == []
    assert result.stderr == "", result.stderr


@pytest.mark.parametrize(("args", "env"), [
    (["--verbose", "jobs", "list"], {}),
    (["jobs", "list"], {"DL_LOG_LEVEL": "INFO"}),
])
def test_verbose_or_dl_log_level_shows_the_info_logs(cli_env, args, env):
    result = invoke(args, env={**cli_env, **env})
    assert result.exit_code == 0, result.output
    messages = [line["message"] for line in _log_lines(result.stderr)]
    assert "using external PostgreSQL" in messages, result.stderr


@pytest.mark.process  # starts the embedded PostgreSQL
def test_a_command_on_the_embedded_server_prints_only_its_answer(server_dir):
    result = invoke(["jobs", "list"], env={"DL_DATA_DIR": str(server_dir / "pgdata"), "DL_LOG_FORMAT": "console"})
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["jobs"] == []
    assert result.stderr == "", result.stderr


async def test_the_service_says_once_which_database_it_uses(dsn, caplog):
    """`serve` opens the engine's App and the HTTP API's App beside it on the same database: one
    line says which database, not "embedded" and then "external"."""
    caplog.set_level(logging.INFO, logger="dataloader")
    async with App(Settings(db_dsn=dsn)) as app:
        api = await app.api_app()
        await api.close()
    said = [r.getMessage() for r in caplog.records if r.getMessage().startswith("using ")]
    assert said == ["using external PostgreSQL"], said


@pytest.mark.parametrize(("args", "env", "name"), [
    (["serve", "--port", "{port}"], {}, "--port"),
    (["serve"], {"DL_PORT": "{port}"}, "DL_PORT"),
])
def test_serve_on_a_taken_port_says_so_before_starting_anything(tmp_path, args, env, name):
    data_dir = tmp_path / "pgdata"
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = str(taken.getsockname()[1])
        result = invoke([a.format(port=port) for a in args],
                        env={"DL_DATA_DIR": str(data_dir), **{k: v.format(port=port) for k, v in env.items()}})
    assert result.exit_code == 2, result.output
    said = f"dataloader: configuration error: {name}: 127.0.0.1:{port} is in use by another process"
    assert error_line(result) == said
    assert not data_dir.exists(), "the embedded server was started before the port was checked"
