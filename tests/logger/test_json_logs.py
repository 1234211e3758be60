"""`dataloader serve` with DL_LOG_FORMAT=json writes one JSON object per line and nothing else, on
stdout and on stderr; every line a job causes carries its job_id and trace_id, including lines of
user code (ctx.log and the logging module, async and sync pipelines), its warnings, and the
failure and retry of its attempts."""

from __future__ import annotations

import asyncio
import json
import re
import signal

import httpx

from tests.api.v1.test_server_process import free_port
from tests.conftest import wait_until

TRACE_ID = re.compile(r"[0-9a-f]{32}")


async def test_serve_writes_only_json_lines_and_job_lines_carry_job_and_trace_ids(python, subprocess_env, db,
                                                                                   tmp_path):
    port = free_port()
    env = {**subprocess_env, "DL_HEARTBEAT_SEC": "0.2", "DL_SHUTDOWN_TIMEOUT_SEC": "5", "DL_LOG_FORMAT": "json",
           "WORKERS_JSON": '[{"queue": "logs-q", "concurrency": 2}]',
           # tracing on, spans exported to stdout: that stream must stay JSON lines too
           "OTEL_TRACES_EXPORTER": "console", "OTEL_SERVICE_NAME": "dataloader-logs-test",
           "PYTHONWARNINGS": "default"}
    out_path, err_path = tmp_path / "serve.stdout", tmp_path / "serve.stderr"
    with out_path.open("wb") as out, err_path.open("wb") as err:
        proc = await asyncio.create_subprocess_exec(python, "-m", "dataloader", "serve", "--port", str(port),
                                                    env=env, stdout=out, stderr=err)
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=5) as http:
            async def healthy() -> bool:
                if proc.returncode is not None:
                    raise AssertionError(f"server exited early: {err_path.read_text()[-3000:]}")
                try:
                    return (await http.get("/health")).status_code == 200
                except httpx.TransportError:
                    return False

            await wait_until(healthy, timeout=30, interval=0.1, message="the server to answer /health")
            jobs = {}
            for task in ("test.logs_async", "test.logs_sync"):
                response = await http.post("/api/v1/jobs/trigger", json={"queue": "logs-q", "task": task, "args": {}})
                assert response.status_code == 201, response.text
                jobs[task] = response.json()["job_id"]
            await http.get("/api/v1/jobs/not-a-uuid/status")  # a request error on the way: its line is JSON too

            async def all_succeeded() -> bool:
                statuses = [(await http.get(f"/api/v1/jobs/{j}/status")).json()["status"] for j in jobs.values()]
                return statuses == ["succeeded", "succeeded"]

            await wait_until(all_succeeded, timeout=30, message="both jobs to fail once, then succeed")
        proc.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(proc.wait(), timeout=20) == 0, err_path.read_text()[-3000:]
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()

    lines = []
    for path in (out_path, err_path):
        for number, text in enumerate(path.read_text().splitlines(), 1):
            try:
                lines.append(json.loads(text))
            except json.JSONDecodeError:
                raise AssertionError(f"{path.name} line {number} is not JSON: {text!r}") from None
            assert isinstance(lines[-1], dict), f"{path.name} line {number} is not a JSON object: {text!r}"
    logs = [line for line in lines if "logger" in line]
    spans = [line for line in lines if "context" in line and "name" in line]
    assert spans, "the console exporter wrote no span"

    for task, prefix in (("test.logs_async", "async"), ("test.logs_sync", "sync")):
        job_id = jobs[task]
        mine = [line for line in logs if line.get("job_id") == job_id]
        for marker in (f"{prefix}-ctx", f"{prefix}-std"):
            attempts = sorted(line["attempt"] for line in mine if line.get("marker") == marker)
            assert attempts == [1, 2], f"{task}: lines of {marker} by attempt: {attempts}"
        user_lines = [line for line in logs if str(line.get("marker", "")).startswith(prefix)]
        assert user_lines and all(line.get("job_id") == job_id for line in user_lines), user_lines
        warned = [line for line in logs if f"UserWarning: {prefix} pipeline warning" in line["message"]]
        assert warned and all(line.get("job_id") == job_id for line in warned), json.dumps(warned)
        failed = [line for line in mine if line["level"] in ("warning", "error") and line.get("attempt") == 1]
        assert failed, f"{task}: no line about its failed first attempt"
        for line in mine:
            assert TRACE_ID.fullmatch(line.get("trace_id", "")), f"{task}: a line of the job without trace_id: {line}"


async def test_serve_on_the_embedded_server_writes_only_json_lines(python, subprocess_env, server_dir, tmp_path):
    """DL_DB_DSN unset: the service starts its own PostgreSQL (initdb, the server, alembic's
    migrations, the stop at the end) and none of that reaches the JSON streams as plain text."""
    port = free_port()
    env = {k: v for k, v in subprocess_env.items() if k != "DL_DB_DSN"}
    env.update({"DL_DATA_DIR": str(server_dir / "data"), "DL_LOG_FORMAT": "json", "DL_SHUTDOWN_TIMEOUT_SEC": "5",
                "WORKERS_JSON": '[{"queue": "logs-q", "concurrency": 1}]', "PYTHONWARNINGS": "default"})
    out_path, err_path = tmp_path / "serve.stdout", tmp_path / "serve.stderr"
    with out_path.open("wb") as out, err_path.open("wb") as err:
        proc = await asyncio.create_subprocess_exec(python, "-m", "dataloader", "serve", "--port", str(port),
                                                    env=env, stdout=out, stderr=err)
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=5) as http:
            async def healthy() -> bool:
                if proc.returncode is not None:
                    raise AssertionError(f"server exited early: {err_path.read_text()[-3000:]}")
                try:
                    return (await http.get("/health")).status_code == 200
                except httpx.TransportError:
                    return False

            await wait_until(healthy, timeout=90, interval=0.2, message="the server to answer /health")
            job_id = (await http.post("/api/v1/jobs/trigger", json={"queue": "logs-q", "task": "test.logs_async",
                                                                   "args": {}})).json()["job_id"]

            async def succeeded() -> bool:
                return (await http.get(f"/api/v1/jobs/{job_id}/status")).json()["status"] == "succeeded"

            await wait_until(succeeded, timeout=30, message="the job to fail once, then succeed")
        proc.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(proc.wait(), timeout=60) == 0, err_path.read_text()[-3000:]
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    lines = 0
    for path in (out_path, err_path):
        for number, text in enumerate(path.read_text().splitlines(), 1):
            try:
                assert isinstance(json.loads(text), dict)
            except (json.JSONDecodeError, AssertionError):
                raise AssertionError(f"{path.name} line {number} is not a JSON object: {text!r}") from None
            lines += 1
    assert lines > 5
    assert "embedded PostgreSQL ready" in err_path.read_text()
