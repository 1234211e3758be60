"""Every code block of README.md and docs/*.md runs as written (issue 34), against a real server:

- python blocks run as scripts, one after the other in one process (tests/docs/run_python_blocks.py),
  with DL_DB_DSN pointing at a fresh migrated test database; they must also name nothing undefined
  (ruff's F821), since a name used only inside a function would not fail the run;
- shell blocks (bash, sh, the `$ ` lines of console) run in bash, with a `dataloader serve` started on
  that database beside them: `dataloader` on their PATH runs each command in this test's process
  (tests/docs/cli_shim.py), and `localhost:8000` is the service's port; a command that asks for a
  confirmation is answered `y`, as the transcripts show;
- json and yaml blocks parse;
- a `python fragment` compiles (top-level `await` allowed); other fragments, `output` and `text`
  blocks are not run: the info string says so (tests/docs/blocks.py);
- what cannot run here (an install, docker, a chaos run, a foreign cluster's configuration) is in
  EXCLUDED below, by name, with the reason.
"""

from __future__ import annotations

import ast
import asyncio
import json
import logging
import os
import shutil
import socket
import socketserver
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import typer
import yaml
from typer import testing as typer_testing

from dataloader import cli
from dataloader.storage import migrate
from tests.conftest import wait_until
from tests.docs.blocks import LANGUAGES, ROOT, Block, blocks, shell_commands
from tests.support.cli import EXITING_MODULES, SCRATCH_DATA_DIR
from tests.support.database import create_database, drop_database

BLOCKS = blocks()

# (doc, how the block's first line starts) -> why it does not run here.
EXCLUDED: dict[tuple[str, str], str] = {
    ("README.md", "python3 -m venv .venv && .venv/bin/pip install . "):
        "installs into a new venv and serves until stopped: the fresh-clone run of .ci/run does this",
    ("README.md", "python3 -m venv .venv && .venv/bin/pip install -q -e '.[test]' "):
        "the whole suite (.ci/run)",
    ("README.md", '.venv/bin/python -m pytest -q -m "(unit or db) and not slow"'):
        "runs the suite itself",
    ("docs/chaos.md", ".venv/bin/python -m pytest -q tests/chaos "):
        "the chaos run (tests/chaos runs it)",
    ("docs/chaos.md", ".venv/bin/python -m tests.chaos --jobs 3000 "):
        "the long chaos runs: half an hour each",
    ("docs/deploy.md", "docker build -t dataloader:local ."):
        "docker (tests/deploy checks the image's files)",
    ("docs/http-api.md", "dataloader serve  "):
        "serves until stopped: this test starts the service itself",
    ("docs/observability.md", "pip install 'dataloader[otel]' opentelemetry-exporter-otlp"):
        "installs packages and exports to a collector",
    ("docs/observability.md", "DL_DATA_DIR=/tmp/otel_demo/data DL_PORT=18723 "):
        "serves until stopped (tests/tracing/test_tracing.py runs the same traced service)",
    ("docs/scaling.md", "# pgbouncer.ini (Debian's pgbouncer 1.18, as used by the tests)"):
        "a PgBouncer's configuration and the settings of another machine (tests/topology/test_pgbouncer.py)",
    ("docs/scaling.md", "DL_DB_DSN=postgresql://dataloader:…@db-main:5432/dataloader "):
        "the settings of three other database servers (tests/topology/test_shards.py)",
}


def _excluded(block: Block) -> str | None:
    return next((why for (doc, start), why in EXCLUDED.items()
                 if block.doc == doc and block.first_line.startswith(start)), None)


def _ids(selected: list[Block]) -> list[str]:
    return [block.name for block in selected]


RUN = [b for b in BLOCKS if b.runs and _excluded(b) is None]
PYTHON = [b for b in RUN if b.lang == "python"]
SHELL = [b for b in RUN if b.lang in ("bash", "sh", "console")]
DATA = [b for b in BLOCKS if b.lang in ("json", "yaml") and "fragment" not in b.tags]
FRAGMENTS = [b for b in BLOCKS if b.lang == "python" and "fragment" in b.tags]


def test_every_block_says_what_it_is_and_every_exclusion_names_a_block():
    untyped = [b.name for b in BLOCKS if b.lang not in LANGUAGES]
    assert not untyped, f"blocks without a known language (```text for a tree or a report): {untyped}"
    stale = [key for key in EXCLUDED if not any(b.doc == key[0] and b.first_line.startswith(key[1]) for b in BLOCKS)]
    assert not stale, f"EXCLUDED names blocks that no doc has: {stale}"
    unrun = [b.name for b in RUN if b.lang not in ("python", "bash", "sh", "console", "json", "yaml")]
    assert not unrun, f"blocks this test does not know how to run: {unrun}"


@pytest.mark.parametrize("block", DATA, ids=_ids(DATA))
def test_data_blocks_parse(block: Block):
    if block.lang == "json":
        try:
            json.loads(block.code)
        except json.JSONDecodeError:  # JSON lines (a log)
            for line in block.code.splitlines():
                json.loads(line)
    else:
        yaml.safe_load(block.code)


@pytest.mark.parametrize("block", FRAGMENTS, ids=_ids(FRAGMENTS))
def test_python_fragments_compile(block: Block):
    compile(block.code, block.name, "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT, dont_inherit=True)


@pytest.mark.process  # ruff
def test_python_blocks_name_nothing_undefined(tmp_path: Path):
    for block in PYTHON:
        (tmp_path / f"{block.doc.replace('/', '_')}_{block.line}.py").write_text(block.code)
    found = subprocess.run([shutil.which("ruff") or str(Path(sys.executable).with_name("ruff")), "check",
                            "--isolated", "--select", "F821,F822,F823", "--output-format", "concise", str(tmp_path)],
                           capture_output=True, text=True, timeout=60)
    assert found.returncode == 0, found.stdout + found.stderr


@pytest.fixture(scope="module")
async def docs_dsn(pg_server) -> AsyncIterator[str]:
    """A fresh, migrated database for the blocks: they create queues, jobs and schedules freely."""
    url = await create_database(pg_server)
    await migrate.upgrade(url)
    yield url
    await drop_database(pg_server, url)


def _env(dsn: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DL_", "WORKERS_JSON", "OTEL_"))}
    env.update({"DL_DB_DSN": dsn, "DL_LOG_FORMAT": "json", "PYTHONUNBUFFERED": "1",
                "PYTHONPATH": os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])})
    return env


@pytest.mark.process  # runs the python blocks in a child process
async def test_python_blocks_run(docs_dsn: str, tmp_path: Path):
    (tmp_path / "blocks.json").write_text(json.dumps([{"name": b.name, "code": b.code} for b in PYTHON]))
    proc = await asyncio.to_thread(
        subprocess.run, [sys.executable, str(ROOT / "tests" / "docs" / "run_python_blocks.py"), "blocks.json",
                         "results.json"], cwd=tmp_path, env=_env(docs_dsn), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-5000:]
    results = json.loads((tmp_path / "results.json").read_text())
    failed = {name: result["error"] for name, result in results.items() if not result["ok"]}
    assert not failed, "\n\n".join(f"{name}:\n{error}" for name, error in failed.items())


def _invoke(command: Any, argv: list[str], env: dict[str, str]) -> Any:
    """tests.support.cli.invoke on a command built once (typer builds the whole command tree on
    every call: two thirds of an in-process command's time), with a confirmation answered `y`."""
    clean: dict[str, str | None] = {k: None for k in os.environ if k.startswith(("DL_", "WORKERS_JSON"))}
    clean.update({"DL_DATA_DIR": str(SCRATCH_DATA_DIR), "DL_LOG_FORMAT": "json", **env})
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level

    def no_os_exit(code: int) -> None:
        raise SystemExit(code)

    with pytest.MonkeyPatch.context() as patch:
        for module in EXITING_MODULES:
            patch.setattr(module, "_exit", no_os_exit)
        patch.setattr(typer_testing, "_get_command", lambda app: command)
        try:
            return typer_testing.CliRunner().invoke(cli.app, argv, env=clean, input="y\n")
        finally:
            root.handlers[:] = handlers
            root.setLevel(level)


class _Commands(socketserver.StreamRequestHandler):
    """Runs what tests/docs/cli_shim.py sends, one command at a time."""

    lock = threading.Lock()
    command: Any = None

    def handle(self) -> None:
        request = json.loads(self.rfile.readline())
        with self.lock:
            if _Commands.command is None:
                _Commands.command = typer.main.get_command(cli.app)
            result = _invoke(_Commands.command, request["argv"], request["env"])
        code = result.exit_code if result.exception is None or isinstance(result.exception, SystemExit) else 1
        stderr = result.stderr
        if result.exception is not None and not isinstance(result.exception, SystemExit):
            stderr += f"{type(result.exception).__name__}: {result.exception}\n"
        self.wfile.write(json.dumps({"stdout": result.stdout, "stderr": stderr, "code": code}).encode() + b"\n")


@pytest.fixture(scope="module")
def cli_shim(tmp_path_factory) -> Iterator[Path]:
    """A directory whose `dataloader` runs each command in this process; DL_DOCS_CLI_SOCKET is its socket."""
    bin_dir = tmp_path_factory.mktemp("docs-bin")
    sock = bin_dir / "cli.sock"
    server = socketserver.ThreadingUnixStreamServer(str(sock), _Commands)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    shim = bin_dir / "dataloader"
    shim.write_text(f'#!/bin/sh\nexec {shutil.which("python3") or sys.executable} '
                    f'{ROOT / "tests" / "docs" / "cli_shim.py"} "$@"\n')
    shim.chmod(0o755)
    yield bin_dir
    server.shutdown()
    server.server_close()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.process  # starts `dataloader serve` and runs bash
async def test_shell_blocks_run(docs_dsn: str, cli_shim: Path, tmp_path: Path):
    port = _free_port()
    env = _env(docs_dsn)
    log = (tmp_path / "serve.log").open("wb")
    service = await asyncio.create_subprocess_exec(sys.executable, "-m", "dataloader", "serve", "--port", str(port),
                                                   env=env, stdout=log, stderr=subprocess.STDOUT, cwd=tmp_path)
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as http:
            async def up() -> bool:
                assert service.returncode is None, (tmp_path / "serve.log").read_text()[-3000:]
                try:
                    return (await http.get("/health")).status_code == 200
                except httpx.TransportError:
                    return False

            await wait_until(up, timeout=90, interval=0.2, message="the service to answer /health")
        shell_env = {**env, "PATH": f"{cli_shim}{os.pathsep}{env['PATH']}",
                     "DL_DOCS_CLI_SOCKET": str(cli_shim / "cli.sock")}
        failed, took = {}, {}
        for block in SHELL:
            script = shell_commands(block)
            for address in ("localhost:8000", "127.0.0.1:8000"):
                script = script.replace(address, f"127.0.0.1:{port}")
            started = time.monotonic()
            proc = await asyncio.to_thread(subprocess.run, ["bash", "-e", "-o", "pipefail", "-c", script],
                                           env=shell_env, cwd=tmp_path, capture_output=True, text=True, timeout=120)
            took[block.name] = round(time.monotonic() - started, 1)
            if proc.returncode != 0:
                failed[block.name] = f"exit {proc.returncode}\n{script}\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}"
        print("seconds per block:", sorted(took.items(), key=lambda item: -item[1])[:8])
        assert not failed, "\n\n".join(f"{name}: {text}" for name, text in failed.items())
    finally:
        service.terminate()
        try:
            await asyncio.wait_for(service.wait(), 60)
        except TimeoutError:
            service.kill()
            await service.wait()
        log.close()
