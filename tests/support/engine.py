"""Running the engine in the test process, and worker subprocesses."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import asyncpg

import tests.support.pipelines  # noqa: F401  (registers test.* pipelines)
from dataloader.config import Settings
from dataloader.jobs.manager import JobManager, JobRequest
from dataloader.node import build_node
from dataloader.storage.repositories import JobRepository
from dataloader.workers.manager import WorkerManager
from dataloader.workers.pipelines.registry import load_pipeline_modules, registry

load_pipeline_modules([])


def make_settings(dsn: str, queues: dict[str, int] | None = None, **overrides: Any) -> Settings:
    workers = [{"queue": q, "concurrency": c} for q, c in (queues or {"default": 4}).items()]
    values: dict[str, Any] = {"db_dsn": dsn, "workers_json": json.dumps(workers), "heartbeat_sec": 0.5,
                              "reaper_period_sec": 0.5, "claim_backoff_sec": 15, "shutdown_timeout_sec": 5,
                              "poll_fallback_sec": 10}
    values.update(overrides)
    return Settings(**values)


def job_service(pool: asyncpg.Pool) -> JobManager:
    return JobManager(JobRepository(pool), registry, default_lease_ttl_sec=60, max_args_bytes=256 * 1024)


async def enqueue(pool: asyncpg.Pool, task: str = "dl.noop", *, lock_key: str | None = None,
                  queue: str = "default", **fields: Any) -> uuid.UUID:
    req = JobRequest(queue=queue, task=task, lock_key=lock_key or uuid.uuid4().hex, **fields)
    result = await job_service(pool).trigger(req)
    return result.job.id


async def job_row(pool: asyncpg.Pool, job_id: uuid.UUID) -> asyncpg.Record:
    return await pool.fetchrow("SELECT * FROM dl_jobs WHERE job_id = $1", job_id)


async def event_kinds(pool: asyncpg.Pool, job_id: uuid.UUID) -> list[str]:
    rows = await pool.fetch("SELECT kind FROM dl_job_events WHERE job_id = $1 ORDER BY event_id", job_id)
    return [r["kind"] for r in rows]


@asynccontextmanager
async def running_engine(dsn: str, pool: asyncpg.Pool, queues: dict[str, int] | None = None,
                         run_reaper: bool = True, **overrides: Any) -> AsyncIterator[WorkerManager]:
    settings = make_settings(dsn, queues, **overrides)
    manager = build_node(settings, dsn, pool, registry, reaper=run_reaper)
    await manager.start()
    await manager.wait_listening()
    try:
        yield manager
    finally:
        await manager.stop()


class WorkerProcess:
    """`python -m dataloader worker` as a real child process."""

    def __init__(self, env: dict[str, str], queues: dict[str, int] | None = None, **settings: Any) -> None:
        self.env = dict(env)
        self.env["WORKERS_JSON"] = json.dumps(
            [{"queue": q, "concurrency": c} for q, c in (queues or {"default": 2}).items()])
        for key, value in settings.items():
            self.env[f"DL_{key.upper()}"] = str(value)
        self.proc: subprocess.Popen[bytes] | None = None
        self.log_path = f"/tmp/dl-test-worker-{uuid.uuid4().hex[:8]}.log"

    def start(self) -> WorkerProcess:
        self._log = open(self.log_path, "wb")
        self.proc = subprocess.Popen([sys.executable, "-m", "dataloader", "worker"], env=self.env,
                                     stdout=self._log, stderr=subprocess.STDOUT)
        return self

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def log(self) -> str:
        with open(self.log_path, encoding="utf-8", errors="replace") as f:
            return f.read()

    async def wait_ready(self, timeout: float = 20.0) -> None:
        deadline = asyncio.get_running_loop().time() + timeout
        while "workers started" not in self.log():
            if self.proc is not None and self.proc.poll() is not None:
                raise AssertionError(f"worker exited with {self.proc.returncode}:\n{self.log()}")
            if asyncio.get_running_loop().time() > deadline:
                raise AssertionError(f"worker not ready in {timeout}s:\n{self.log()}")
            await asyncio.sleep(0.05)

    def signal(self, sig: int) -> None:
        os.kill(self.pid, sig)

    async def wait_exit(self, timeout: float = 20.0) -> int:
        assert self.proc is not None
        deadline = asyncio.get_running_loop().time() + timeout
        while self.proc.poll() is None:
            if asyncio.get_running_loop().time() > deadline:
                raise AssertionError(f"worker did not exit in {timeout}s:\n{self.log()}")
            await asyncio.sleep(0.05)
        return self.proc.returncode

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)

    def close(self) -> None:
        self.kill()
        if hasattr(self, "_log"):
            self._log.close()
