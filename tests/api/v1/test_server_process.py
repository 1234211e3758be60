"""`python -m dataloader serve` as a real process: HTTP, workers and reaper together, and a SIGTERM
that drains and exits 0."""

from __future__ import annotations

import asyncio
import json
import signal
import socket

import httpx

from tests.conftest import wait_until


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


async def test_serve_runs_jobs_and_stops_cleanly_on_sigterm(python, subprocess_env, db, tmp_path):
    port = free_port()
    env = {**subprocess_env, "DL_HEARTBEAT_SEC": "0.2", "DL_SHUTDOWN_TIMEOUT_SEC": "5",
           "WORKERS_JSON": '[{"queue": "default", "concurrency": 2}]'}
    stderr_path = tmp_path / "serve.stderr"
    with stderr_path.open("wb") as stderr:
        proc = await asyncio.create_subprocess_exec(
            python, "-m", "dataloader", "serve", "--port", str(port),
            env=env, stdout=asyncio.subprocess.DEVNULL, stderr=stderr)
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=5) as http:
            async def healthy():
                if proc.returncode is not None:
                    raise AssertionError(f"server exited early: {stderr_path.read_text()[-3000:]}")
                try:
                    return (await http.get("/health")).status_code == 200
                except httpx.TransportError:
                    return False

            await wait_until(healthy, timeout=30, interval=0.1, message="the server to answer /health")

            response = await http.post("/api/v1/jobs/trigger", headers={"X-Request-ID": "proc-1"}, json={
                "queue": "default", "task": "dl.sleep", "args": {"seconds": 0.3, "chunks": 3},
                "lock_key": "proc"})
            assert response.status_code == 201, response.text
            assert response.json()["served"] is True
            job_id = response.json()["job_id"]

            async def succeeded():
                return (await http.get(f"/api/v1/jobs/{job_id}/status")).json()["status"] == "succeeded"

            await wait_until(succeeded, timeout=20, message="dl.sleep to succeed")

            # A long job is running when SIGTERM arrives: the drain must hand it back, not lose it.
            long_id = (await http.post("/api/v1/jobs/trigger", json={
                "queue": "default", "task": "dl.sleep", "args": {"seconds": 60, "chunks": 600},
                "lock_key": "proc-long"})).json()["job_id"]

            async def running():
                return (await http.get(f"/api/v1/jobs/{long_id}/status")).json()["status"] == "running"

            await wait_until(running, timeout=20, message="the long job to start")
            status = (await http.get("/status")).json()
            assert status["workers"]["running_jobs"][0]["job_id"] == long_id

        proc.send_signal(signal.SIGTERM)
        try:
            code = await asyncio.wait_for(proc.wait(), timeout=20)
        except TimeoutError:
            raise AssertionError("the server did not exit within 20 s of SIGTERM") from None
        assert code == 0, stderr_path.read_text()[-3000:]
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()

    assert await db.fetchval("SELECT status::text FROM dl_jobs WHERE job_id = $1", long_id) == "queued"
    log_lines = [json.loads(line) for line in stderr_path.read_text().splitlines() if line.startswith("{")]
    access = [line for line in log_lines if line["logger"] == "dataloader.access"]
    first_trigger = next(line for line in access if line.get("request_id") == "proc-1")
    assert (first_trigger["method"], first_trigger["status"]) == ("POST", 201)
    assert not any(line["logger"] == "uvicorn.access" for line in log_lines), "uvicorn access log doubles ours"
    messages = [line["message"] for line in log_lines]
    assert "workers stopped" in messages
    # the request id of the HTTP call that enqueued a job follows it into the worker's log lines
    worker_lines = [line for line in log_lines if line["logger"] == "dataloader.worker"
                    and line.get("job_id") == job_id]
    assert {line["message"] for line in worker_lines} >= {"job started", "job succeeded"}
    assert all(line.get("request_id") == "proc-1" for line in worker_lines), worker_lines
