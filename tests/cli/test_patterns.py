"""The CLI faces of chains, restartable and unique jobs (in-process; the `jobs` group as a real process:
tests/cli/test_cli.py)."""

from __future__ import annotations

import json
import subprocess

from tests.support.cli import run


def jobs(cli_env, *args: str) -> subprocess.CompletedProcess[str]:
    return run(["jobs", *args], cli_env)


async def test_trigger_then_restartable_unique_and_chain(runs, cli_env):
    made = jobs(cli_env, "trigger", "--task", "dl.noop", "--lock-key", "k", "--queue", "idle",
                "--then", "dl.noop", "--then", '{"task": "dl.sleep", "queue": "other"}')
    assert made.returncode == 0, made.stderr
    job_id = json.loads(made.stdout)["job_id"]
    chain = json.loads(jobs(cli_env, "chain", job_id).stdout)
    assert chain["status"] == "running" and [s["task"] for s in chain["stages"]] == ["dl.noop"]
    assert [s["task"] for s in chain["stages"][0]["chain_next"]] == ["dl.noop", "dl.sleep"]

    first = json.loads(jobs(cli_env, "trigger", "--task", "dl.noop", "--lock-key", "re", "--queue", "idle",
                            "--restartable", "--args", '{"v": 1}').stdout)
    again = json.loads(jobs(cli_env, "trigger", "--task", "dl.noop", "--lock-key", "re", "--queue", "idle",
                            "--restartable", "--args", '{"v": 2}').stdout)
    assert first["created"] is True and again["created"] is False and again["job_id"] == first["job_id"]

    unique = [json.loads(jobs(cli_env, "trigger", "--task", "dl.noop", "--lock-key", "u", "--queue", "idle",
                              "--unique-for-sec", "600").stdout) for _ in range(2)]
    assert unique[0]["job_id"] == unique[1]["job_id"]

    bad = jobs(cli_env, "trigger", "--task", "dl.noop", "--lock-key", "k", "--then", "{oops")
    assert bad.returncode == 2 and "not JSON" in bad.stderr
    missing = jobs(cli_env, "chain", first["job_id"])
    assert missing.returncode == 1 and "chain_not_found" in missing.stderr
    assert await runs.fetchval("SELECT count(*) FROM dl_jobs") == 3
