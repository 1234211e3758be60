"""With DL_DB_DSN unset the CLI starts its own PostgreSQL in DL_DATA_DIR and stops it on exit."""

import json
import subprocess
import sys

import psutil


def _postgres_running_on(data_dir) -> bool:
    for proc in psutil.process_iter(attrs=("name", "cmdline")):
        if proc.info["name"] == "postgres" and str(data_dir) in " ".join(proc.info["cmdline"] or []):
            return True
    return False


def test_embedded_server_is_started_used_and_stopped(server_dir, subprocess_env):
    data_dir = server_dir / "pgdata"
    env = {k: v for k, v in subprocess_env.items() if k != "DL_DB_DSN"}
    env["DL_DATA_DIR"] = str(data_dir)
    env["DL_LOG_LEVEL"] = "INFO"  # the embedded server's lines are INFO: a command is quiet without it

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "dataloader", *args], env=env, capture_output=True,
                              text=True, timeout=120)

    trigger = cli("jobs", "trigger", "--task", "dl.noop", "--lock-key", "k", "--idempotency-key", "emb")
    assert trigger.returncode == 0, trigger.stderr
    job = json.loads(trigger.stdout)
    assert (data_dir / "PG_VERSION").exists()
    assert "using embedded PostgreSQL" in trigger.stderr
    assert not _postgres_running_on(data_dir), "the embedded server must be stopped on exit"

    # a second start reuses the same data: the job is still there
    status = cli("jobs", "status", job["job_id"])
    assert status.returncode == 0, status.stderr
    assert json.loads(status.stdout)["status"] == "queued"
    assert not _postgres_running_on(data_dir)
