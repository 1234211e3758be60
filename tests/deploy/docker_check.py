"""Build the image and run it with the embedded PostgreSQL: /health answers, the image's HEALTHCHECK
turns healthy, it runs as non-root, a job succeeds, and `docker stop` exits 0.

A documented command, not part of the test suite, because it needs what CI does not have: a
running Docker daemon and a base image (DL_DOCKER_BASE_IMAGE if set, else python:3.11-slim, present
locally or pullable). A skipped test would prove nothing yet look like one. Run it with

    .venv/bin/python -m tests.deploy.docker_check

It exits 0 when every check passed, 1 when one failed, and 2 (saying why) when it cannot run here.
tests/deploy/test_deploy_files.py is the check that always runs in the suite.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BASE_IMAGE = os.environ.get("DL_DOCKER_BASE_IMAGE", "python:3.11-slim")
TAG = "dataloader:deploy-test"


def docker(*args: str, timeout: float = 120, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["docker", *args], capture_output=True, text=True, timeout=timeout, check=check)


def runtime_problem() -> str | None:
    try:
        if docker("info", "--format", "{{.ServerVersion}}", timeout=20, check=False).returncode != 0:
            return "no Docker daemon answers"
    except (FileNotFoundError, subprocess.TimeoutExpired):
        return "no docker client, or the daemon does not answer"
    if docker("image", "inspect", BASE_IMAGE, check=False).returncode == 0:
        return None
    pulled = docker("pull", BASE_IMAGE, timeout=300, check=False)
    if pulled.returncode != 0:
        return f"base image {BASE_IMAGE} is not available ({pulled.stderr.strip()[:200]})"
    return None


def http_json(method: str, url: str, body: dict | None = None) -> tuple[int, dict]:
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url, data=data, method=method, headers={"content-type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"{}")


def wait_for(what: str, probe, timeout: float) -> object:
    deadline = time.monotonic() + timeout
    last: object = None
    while time.monotonic() < deadline:
        try:
            last = probe()
        except (OSError, ValueError) as exc:
            last = exc
        if last and not isinstance(last, Exception):
            return last
        time.sleep(1)
    raise AssertionError(f"timed out waiting for {what}; last: {last!r}")


def build_image() -> str:
    build = docker("build", "--build-arg", f"BASE_IMAGE={BASE_IMAGE}", "-t", TAG, str(ROOT),
                   timeout=1200, check=False)
    assert build.returncode == 0, build.stdout[-3000:] + build.stderr[-3000:]
    return TAG


def check_image_serves_with_the_embedded_database(image: str) -> None:
    name = f"dl-deploy-test-{uuid.uuid4().hex[:8]}"
    # Same HEALTHCHECK command as the image, checked more often so the test need not wait 15 s.
    docker("run", "-d", "--name", name, "--health-interval=2s", "--health-start-period=60s",
           "-p", "127.0.0.1::8000", image)
    try:
        port = docker("port", name, "8000/tcp").stdout.strip().splitlines()[0].rsplit(":", 1)[1]
        base = f"http://127.0.0.1:{port}"

        health = wait_for("/health", lambda: http_json("GET", f"{base}/health")[1].get("status") == "ok", 120)
        assert health

        def health_status() -> str | None:
            state = json.loads(docker("inspect", "--format", "{{json .State}}", name).stdout)
            assert state["Running"], state
            return state["Health"]["Status"] if state["Health"]["Status"] == "healthy" else None

        assert wait_for("HEALTHCHECK healthy", health_status, 90) == "healthy"

        assert docker("exec", name, "id", "-u").stdout.strip() not in ("", "0")

        code, job = http_json("POST", f"{base}/api/v1/jobs/trigger", {
            "queue": "default", "task": "dl.sleep", "lock_key": "deploy-test",
            "args": {"seconds": 1, "chunks": 2}})
        assert code in (200, 201, 202), job

        def succeeded() -> bool:
            status = http_json("GET", f"{base}/api/v1/jobs/{job['job_id']}/status")[1]["status"]
            assert status in ("queued", "running", "succeeded"), status
            return status == "succeeded"

        assert wait_for("the job to succeed", succeeded, 60)

        docker("stop", "-t", "40", name, timeout=60)
        state = json.loads(docker("inspect", "--format", "{{json .State}}", name).stdout)
        assert state["ExitCode"] == 0, docker("logs", "--tail", "30", name).stderr
    finally:
        docker("rm", "-f", "-v", name, check=False)


def main() -> int:
    problem = runtime_problem()
    if problem:
        print(f"docker_check: cannot run here: {problem}", file=sys.stderr)
        return 2
    try:
        check_image_serves_with_the_embedded_database(build_image())
    except AssertionError as exc:
        print(f"docker_check: FAILED: {exc}", file=sys.stderr)
        return 1
    print("docker_check: the image builds, serves, turns healthy, runs as non-root, runs a job and stops with 0")
    return 0


if __name__ == "__main__":
    sys.exit(main())
