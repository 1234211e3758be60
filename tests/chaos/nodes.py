"""Real `python -m dataloader serve` node processes for the chaos suite.

A node slot keeps its port across incarnations; every incarnation gets its own DL_NODE_NAME
(`n1.3` = slot 1, third start) and its own log file, so the journal's `picked` events (whose
`worker` is the node name) say exactly which process ran which attempt.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Incarnation:
    name: str
    proc: subprocess.Popen[bytes]
    log_path: Path
    started_at: float
    ready_at: float | None = None
    ended_at: float | None = None
    end: str | None = None  # kill9 | sigterm | stop
    exit_code: int | None = None


@dataclass
class NodeSlot:
    """One node of the cluster: a fixed port, restarted as new processes."""

    index: int
    port: int
    env: dict[str, str]
    log_dir: Path
    history: list[Incarnation] = field(default_factory=list)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def current(self) -> Incarnation | None:
        return self.history[-1] if self.history else None

    def alive(self) -> bool:
        cur = self.current
        return cur is not None and cur.proc.poll() is None

    def ready(self) -> bool:
        cur = self.current
        return cur is not None and cur.ready_at is not None and cur.proc.poll() is None

    def start(self) -> Incarnation:
        assert not self.alive(), f"node {self.index} is already running"
        name = f"n{self.index}.{len(self.history) + 1}"
        log_path = self.log_dir / f"{name}.log"
        env = dict(self.env, DL_NODE_NAME=name, DL_PORT=str(self.port))
        with open(log_path, "wb") as log:
            proc = subprocess.Popen([sys.executable, "-m", "dataloader", "serve"], env=env,
                                    stdout=log, stderr=subprocess.STDOUT)
        inc = Incarnation(name=name, proc=proc, log_path=log_path, started_at=time.time())
        self.history.append(inc)
        return inc

    async def wait_ready(self, client: httpx.AsyncClient, timeout: float) -> Incarnation:
        """Poll /health of the current incarnation until it answers (the lifespan, which starts the
        workers, has completed by then)."""
        inc = self.current
        assert inc is not None
        deadline = time.monotonic() + timeout
        while True:
            if inc.proc.poll() is not None:
                raise NodeError(f"{inc.name} exited with {inc.proc.returncode} while starting:\n"
                                f"{tail(inc.log_path)}")
            try:
                r = await client.get(f"{self.url}/health", timeout=2)
                if r.status_code == 200 and r.json().get("node") == inc.name:
                    inc.ready_at = time.time()
                    return inc
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                raise NodeError(f"{inc.name} not ready in {timeout}s:\n{tail(inc.log_path)}")
            await asyncio.sleep(0.1)

    def kill9(self) -> Incarnation:
        inc = self.current
        assert inc is not None
        inc.proc.send_signal(signal.SIGKILL)
        inc.exit_code = inc.proc.wait(10)
        inc.ended_at, inc.end = time.time(), "kill9"
        return inc

    def sigterm(self) -> Incarnation:
        inc = self.current
        assert inc is not None
        inc.proc.send_signal(signal.SIGTERM)
        inc.end = "sigterm"
        return inc

    async def wait_exit(self, timeout: float) -> int:
        inc = self.current
        assert inc is not None
        deadline = time.monotonic() + timeout
        while inc.proc.poll() is None:
            if time.monotonic() > deadline:
                raise NodeError(f"{inc.name} did not exit in {timeout}s:\n{tail(inc.log_path)}")
            await asyncio.sleep(0.05)
        inc.exit_code, inc.ended_at = inc.proc.returncode, time.time()
        return inc.exit_code

    def close(self) -> None:
        """Kill whatever is still running (clean-up after a failure)."""
        for inc in self.history:
            if inc.proc.poll() is None:
                inc.proc.send_signal(signal.SIGKILL)
                inc.proc.wait(10)
                inc.ended_at, inc.end = inc.ended_at or time.time(), inc.end or "cleanup"


class NodeError(AssertionError):
    pass


def tail(path: Path, lines: int = 30) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def node_env(base: dict[str, str], *, dsn: str, queue: str, concurrency: int, heartbeat_sec: float,
             reaper_period_sec: float, shutdown_timeout_sec: float, claim_backoff_sec: float,
             log_level: str, root: Path, queue_limits: dict[str, object] | None = None,
             workflow_queue: str | None = None, workflow_concurrency: int = 4,
             poll_fallback_sec: float = 10.0) -> dict[str, str]:
    env = {k: v for k, v in base.items() if not k.startswith(("DL_", "WORKERS_JSON", "CHAOS_WF_QUEUE"))}
    workers = [{"queue": queue, "concurrency": concurrency}]
    if workflow_queue:  # the workflows' runs and children (node_workflows.py registers them there)
        workers.append({"queue": workflow_queue, "concurrency": workflow_concurrency})
        env["CHAOS_WF_QUEUE"] = workflow_queue
    env.update({
        "DL_DB_DSN": dsn,
        "WORKERS_JSON": json.dumps(workers),
        "DL_PIPELINE_MODULES": "tests.chaos.pipelines,tests.chaos.node_capabilities,tests.chaos.node_workflows",
        "DL_HEARTBEAT_SEC": str(heartbeat_sec),
        "DL_REAPER_PERIOD_SEC": str(reaper_period_sec),
        "DL_SHUTDOWN_TIMEOUT_SEC": str(shutdown_timeout_sec),
        "DL_CLAIM_BACKOFF_SEC": str(claim_backoff_sec),
        "DL_POLL_FALLBACK_SEC": str(poll_fallback_sec),
        # observers move within dead_after + heartbeat (7 s); fence_after = 6 - 2 - 1 = 3 s
        "DL_NODE_HEARTBEAT_SEC": "1",
        "DL_NODE_DEAD_AFTER_SEC": "6",
        "DL_OBSERVER_STOP_GRACE_SEC": "2",
        # a killed runner's operation is taken over after 3 s; its batches are throttled so that
        # the operation is still running when its node is killed
        "DL_OPERATIONS_LEASE_SEC": "3",
        "DL_OPERATIONS_BATCH_PAUSE_SEC": "0.2",
        "DL_OPERATIONS_PERIOD_SEC": "2",
        # the queue's flow limits (docs/flow-control.md), declared alike on every node
        "DL_QUEUES_JSON": json.dumps({queue: queue_limits} if queue_limits else {}),
        "DL_LOG_FORMAT": "json",
        "DL_LOG_LEVEL": log_level,
        "PYTHONUNBUFFERED": "1",
        "PYTHONPATH": os.pathsep.join(p for p in [str(root), base.get("PYTHONPATH", "")] if p),
    })
    return env
