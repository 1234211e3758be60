"""The deployment files agree with the code: .env.example documents exactly the variables Settings
reads (with their real defaults), and the Dockerfile and compose.yaml only use commands, routes and
variables that exist. No container runtime needed."""

from __future__ import annotations

import re
import shlex
import subprocess
from pathlib import Path

import pytest
import yaml
from fastapi.testclient import TestClient
from pydantic import AliasChoices
from typer.testing import CliRunner

from dataloader.api import create_app
from dataloader.cli import app as cli_app
from dataloader.config import Settings, parse_workers_json

ROOT = Path(__file__).resolve().parents[2]
ENV_EXAMPLE = ROOT / ".env.example"
DOCKERFILE = ROOT / "Dockerfile"
COMPOSE = ROOT / "compose.yaml"

# Variables of the postgres service in compose.yaml, documented in .env.example but not read by dataloader.
COMPOSE_ONLY = {"POSTGRES_USER", "POSTGRES_PASSWORD", "POSTGRES_DB"}
SPEC_WORKERS_JSON = '[{"queue":"load.cbr","concurrency":2},{"queue":"load.sgx","concurrency":1}]'

# `# NAME=value` (one space): a documented variable. Indented example lines (`#   NAME=`) are not.
ASSIGNMENT = re.compile(r"^#? ?([A-Z][A-Z0-9_]*)=(.*)$")


def settings_env_names() -> dict[str, str]:
    """Environment variable -> Settings field, as pydantic-settings reads them."""
    prefix = Settings.model_config.get("env_prefix", "")
    names = {}
    for field_name, field in Settings.model_fields.items():
        alias = field.validation_alias
        if isinstance(alias, AliasChoices):  # code names and the environment's (the upper-case one)
            alias = next((c for c in alias.choices if isinstance(c, str) and c.isupper()), None)
        env = alias if isinstance(alias, str) else f"{prefix}{field_name}".upper()
        names[env] = field_name
    return names


def documented() -> dict[str, tuple[str, list[str]]]:
    """Variable -> (value on its `# NAME=value` line, the comment block just above it)."""
    lines = ENV_EXAMPLE.read_text().splitlines()
    found: dict[str, tuple[str, list[str]]] = {}
    for index, line in enumerate(lines):
        match = ASSIGNMENT.match(line)
        if not match:
            continue
        name, value = match.groups()
        assert name not in found, f"{name} is documented twice in .env.example"
        block: list[str] = []
        back = index - 1
        while back >= 0 and lines[back].startswith("#"):
            if not ASSIGNMENT.match(lines[back]):
                block.insert(0, lines[back])
            back -= 1
        found[name] = (value, block)
    return found


def dockerfile_instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with continuation lines joined and comments dropped."""
    joined = re.sub(r"\\\n", " ", DOCKERFILE.read_text())
    result = []
    for line in joined.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            word, _, rest = line.partition(" ")
            result.append((word.upper(), rest.strip()))
    return result


def runtime_stage_start(instructions: list[tuple[str, str]]) -> int:
    return max(index for index, (word, _) in enumerate(instructions) if word == "FROM")


def test_env_example_lists_exactly_the_settings_variables():
    doc = documented()
    expected = set(settings_env_names())
    listed = set(doc) - COMPOSE_ONLY
    assert listed - expected == set(), "documented in .env.example but not read by Settings"
    assert expected - listed == set(), "read by Settings but not documented in .env.example"


def test_each_variable_has_a_meaning_and_a_default():
    for name, (_, block) in documented().items():
        text = " ".join(block)
        assert len(text) > 20, f"{name}: no one-line meaning above it in .env.example"
        assert "Default" in text, f"{name}: the comment above it does not state its default"


def test_documented_defaults_are_the_real_defaults(monkeypatch):
    names = settings_env_names()
    doc = documented()
    for env in names:
        monkeypatch.delenv(env, raising=False)
    defaults = Settings()
    checked = stated = 0
    for env, field_name in names.items():
        field = Settings.model_fields[field_name]
        if field.default_factory is not None:
            continue  # per machine/process (data dir, node name): described in words
        value = doc[env][0]
        if field.default is None:
            assert value == "", f"{env} is unset by default: its line should be `# {env}=`"
            continue
        monkeypatch.setenv(env, value)
        parsed = getattr(Settings(), field_name)
        monkeypatch.delenv(env)
        assert parsed == getattr(defaults, field_name), f"{env}={value} is not the default"
        # the words above the line, where they name a plain default, name the same one
        said = re.search(r"Default: ([\w.-]+)\.?$", " ".join(doc[env][1]).rstrip())
        if said is not None and re.fullmatch(r"-?\d+(\.\d+)?|true|false", said.group(1)):
            monkeypatch.setenv(env, said.group(1))
            words = getattr(Settings(), field_name)
            monkeypatch.delenv(env)
            assert words == getattr(defaults, field_name), f"{env}'s comment says Default: {said.group(1)}"
            stated += 1
        checked += 1
    assert checked >= 10 and stated >= 10


def test_workers_json_examples_parse_and_include_the_spec_example():
    text = ENV_EXAMPLE.read_text()
    examples = re.findall(r"^#\s*WORKERS_JSON=(\S+)", text, flags=re.MULTILINE)
    assert SPEC_WORKERS_JSON in examples
    assert len(set(examples)) >= 3
    for raw in examples:
        parse_workers_json(raw)  # raises ConfigError on a broken example


@pytest.mark.process  # runs git
def test_env_is_ignored_by_git_but_the_example_is_not():
    def ignored(path: str) -> bool:
        done = subprocess.run(["git", "check-ignore", "-q", "--no-index", path], cwd=ROOT, check=False)
        assert done.returncode in (0, 1), "git check-ignore failed"
        return done.returncode == 0

    assert ignored(".env")
    assert not ignored(".env.example")


def test_dockerfile_runs_an_existing_command_as_non_root_on_all_interfaces():
    instructions = dockerfile_instructions()
    runtime = instructions[runtime_stage_start(instructions):]
    last = {word: rest for word, rest in runtime}
    entrypoint = yaml.safe_load(last["ENTRYPOINT"])
    cmd = yaml.safe_load(last["CMD"])
    argv = entrypoint + cmd
    assert "dataloader" in argv
    subcommand = argv[argv.index("dataloader") + 1:]
    assert subcommand == ["serve"]
    result = CliRunner().invoke(cli_app, [*subcommand, "--help"])
    assert result.exit_code == 0, result.output

    user = last["USER"].split(":")[0]
    assert user not in ("root", "0")
    env = {}
    for word, rest in runtime:
        if word == "ENV":
            env.update(item.split("=", 1) for item in shlex.split(rest))
    assert env["DL_HOST"] == "0.0.0.0"
    assert last["EXPOSE"] == env["DL_PORT"] == "8000"
    unknown = {key for key in env if key.startswith("DL_")} - set(settings_env_names())
    assert unknown == set(), "the Dockerfile sets variables Settings does not read"
    # The embedded PostgreSQL's data directory is under the directory made for the non-root user.
    assert env["DL_DATA_DIR"].startswith("/var/lib/dataloader/")
    assert any(word == "RUN" and "-o dataloader" in rest and "/var/lib/dataloader" in rest
               for word, rest in runtime)


def test_dockerfile_healthcheck_hits_a_route_of_the_app():
    instructions = dockerfile_instructions()
    healthcheck = next(rest for word, rest in instructions if word == "HEALTHCHECK")
    paths = re.findall(r"http://127\.0\.0\.1:[^/]+(/[a-z/]*)", healthcheck)
    assert paths == ["/health"]
    assert "urllib.request" in healthcheck  # no curl in a slim image
    # Without `with`, TestClient runs no lifespan: /health answers without a database, as it must.
    response = TestClient(create_app(Settings())).get(paths[0])
    assert response.status_code == 200, response.text
    assert response.json()["status"] == "ok"


def test_dockerfile_bakes_in_no_secrets():
    for word, rest in dockerfile_instructions():
        if word in ("ENV", "ARG", "LABEL"):
            assert not re.search(r"DL_DB_DSN|DL_API_TOKEN|PASSWORD|SECRET|TOKEN", rest, re.IGNORECASE), rest


def test_dockerignore_keeps_the_build_context_small():
    lines = ROOT.joinpath(".dockerignore").read_text().splitlines()
    patterns = {line.strip() for line in lines if line.strip() and not line.startswith("#")}
    assert {".git", ".venv", "bench/results", "tests", "**/__pycache__", ".env"} <= patterns
    for needed in ("src", "pyproject.toml", "README.md"):
        assert needed not in patterns


def test_compose_stack_wires_dataloader_to_a_healthy_postgres():
    compose = yaml.safe_load(COMPOSE.read_text())
    services = compose["services"]
    postgres = services["postgres"]
    assert postgres["image"] == "postgres:16"
    assert "pg_isready" in " ".join(postgres["healthcheck"]["test"])

    commands = {}
    for name, service in services.items():
        if name == "postgres":
            continue
        assert service["depends_on"]["postgres"]["condition"] == "service_healthy", name
        assert "@postgres:5432/" in service["environment"]["DL_DB_DSN"], name
        assert set(service["environment"]) <= set(settings_env_names()), name
        commands[name] = service["command"]
    assert sorted(c[0] for c in commands.values()) == ["serve", "worker"]
    for command in commands.values():
        result = CliRunner().invoke(cli_app, [*command, "--help"])
        assert result.exit_code == 0, result.output


def test_compose_variables_are_documented():
    used = set(re.findall(r"\$\{([A-Z][A-Z0-9_]*)", COMPOSE.read_text()))
    assert used, "compose.yaml interpolates no variables?"
    assert used <= set(documented()), "compose.yaml reads variables .env.example does not document"
    assert used >= COMPOSE_ONLY


@pytest.mark.parametrize("name", ["docker build", "compose.yaml", ".env.example", "docs/deploy.md"])
def test_readme_deploy_section_points_at_the_files(name):
    readme = ROOT.joinpath("README.md").read_text()
    section = readme.split("## Deploy", 1)[1].split("\n## ", 1)[0]
    assert name in section
