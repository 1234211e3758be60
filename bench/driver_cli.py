"""The command line every system's driver script shares (stdlib only; runs in either venv).

A driver wraps one system's public API in a few async methods; this module turns them into the
actions the harness calls, times them inside the driver process (so process start-up and imports
are not part of an enqueue rate), and prints one JSON object as the last line of stdout.

    driver.py install        --dsn D
    driver.py enqueue-single --dsn D --n N
    driver.py enqueue-single-tx --dsn D --n N    (each enqueue inside the caller's own transaction)
    driver.py enqueue-batch  --dsn D --n N --batch B
    driver.py prefill        --dsn D --n N [--task noop|mark] [--serial]
    driver.py enqueue-paced  --dsn D --n N --interval S
    driver.py worker         --dsn D --concurrency C [--serial]   (peers; runs until SIGTERM)
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from typing import Any, Protocol

# Keys of marked jobs are their index; the warm-up job of a run uses this one.
WARMUP_KEY = -1


class Driver(Protocol):
    async def open(self, dsn: str) -> None: ...
    async def close(self) -> None: ...
    async def install(self) -> None: ...
    async def ready(self) -> None: ...
    async def enqueue_one(self, key: int, task: str) -> None: ...
    async def enqueue_one_in_transaction(self, key: int, task: str) -> None: ...
    async def enqueue_many(self, keys: range, task: str, serial: bool) -> None: ...
    async def worker(self, concurrency: int, serial: bool) -> None: ...


def _parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    parser.add_argument("action", choices=["install", "enqueue-single", "enqueue-single-tx", "enqueue-batch", "prefill",
                                           "enqueue-paced", "worker"])
    parser.add_argument("--dsn", required=True)
    parser.add_argument("--n", type=int, default=0)
    parser.add_argument("--start", type=int, default=0, help="first key")
    parser.add_argument("--batch", type=int, default=1000)
    parser.add_argument("--task", choices=["noop", "mark"], default="noop")
    parser.add_argument("--serial", action="store_true", help="all jobs on one lock / key")
    parser.add_argument("--interval", type=float, default=0.01)
    parser.add_argument("--concurrency", type=int, default=16)
    return parser.parse_args(argv)


async def _run(driver: Driver, args: argparse.Namespace) -> dict[str, Any]:
    await driver.open(args.dsn)
    try:
        if args.action == "install":
            await driver.install()
            return {"ok": True}
        if args.action == "worker":
            await driver.worker(args.concurrency, args.serial)
            return {"ok": True}
        # Connections are opened before any clock starts.
        await driver.ready()
        if args.action in ("enqueue-single", "enqueue-single-tx"):
            if args.action == "enqueue-single-tx" and not hasattr(driver, "enqueue_one_in_transaction"):
                return {"unsupported": True}
            one = driver.enqueue_one if args.action == "enqueue-single" else driver.enqueue_one_in_transaction
            probe = await CpuProbe.start(args.dsn)
            started = time.perf_counter()
            for key in range(args.start, args.start + args.n):
                await one(key, args.task)
            return {"seconds": time.perf_counter() - started, "n": args.n, **await probe.stop()}
        if args.action in ("enqueue-batch", "prefill"):
            probe = await CpuProbe.start(args.dsn)
            started = time.perf_counter()
            for first in range(args.start, args.start + args.n, args.batch):
                await driver.enqueue_many(range(first, min(first + args.batch, args.start + args.n)),
                                          args.task, args.serial)
            return {"seconds": time.perf_counter() - started, "n": args.n, **await probe.stop()}
        if args.action == "enqueue-paced":
            # An absolute schedule (t0 + i*interval), so a slow enqueue does not stretch the rest.
            # The enqueue timestamp is taken right before the call, by the client's own clock.
            loop_t0 = time.perf_counter()
            sent: list[tuple[int, float]] = []
            for i, key in enumerate(range(args.start, args.start + args.n)):
                delay = loop_t0 + i * args.interval - time.perf_counter()
                if delay > 0:
                    await asyncio.sleep(delay)
                at = time.time()
                await driver.enqueue_one(key, "mark")
                sent.append((key, at))
            return {"sent": sent}
        raise AssertionError(args.action)
    finally:
        await driver.close()


def _on_cpu_sec(pid: int) -> float:
    """A process's time on CPU (ns precision) from /proc/<pid>/schedstat; 0 once it is gone."""
    try:
        with open(f"/proc/{pid}/schedstat") as f:
            return int(f.read().split()[0]) / 1e9
    except (FileNotFoundError, ProcessLookupError, ValueError):
        return 0.0


class CpuProbe:
    """CPU of this driver process and of the database's client backends (but the probe's own idle
    session) over the timed loop: the per-job CPU the harness reports beside each rate. The
    backends' figure needs the server on this machine (/proc); elsewhere it reads None."""

    def __init__(self, conn: Any, backends: dict[int, float], client: float) -> None:
        self.conn, self.backends, self.client = conn, backends, client

    @staticmethod
    async def _backends(conn: Any) -> dict[int, float]:
        rows = await conn.fetch("SELECT pid FROM pg_stat_activity WHERE datname = current_database() "
                                "AND backend_type = 'client backend' AND pid <> pg_backend_pid()")
        return {row["pid"]: _on_cpu_sec(row["pid"]) for row in rows}

    @classmethod
    async def start(cls, dsn: str) -> CpuProbe:
        import asyncpg  # both venvs have it; imported here so the module itself stays stdlib-only

        conn = await asyncpg.connect(dsn)
        backends = await cls._backends(conn)
        return cls(conn, backends, time.process_time())

    async def stop(self) -> dict[str, float | None]:
        client = time.process_time() - self.client
        try:
            after = await self._backends(self.conn)
        finally:
            await self.conn.close()
        # A backend that appeared during the loop counts from 0 (its start-up is part of the work).
        db = sum(value - self.backends.get(pid, 0.0) for pid, value in after.items())
        return {"client_cpu_sec": client, "db_cpu_sec": db if any(after.values()) else None}


def main(driver: Driver, argv: list[str] | None = None, *, uvloop: bool = False) -> None:
    """Run one action of `driver`. `uvloop`: on uvloop's event loop, as the system's own worker CLI
    runs (PgQueuer's `pgq run`), so each system is measured on its own defaults."""
    args = _parse(sys.argv[1:] if argv is None else argv)
    loop_factory = None
    if uvloop:
        import uvloop as uvloop_module

        loop_factory = uvloop_module.new_event_loop
    with asyncio.Runner(loop_factory=loop_factory) as runner:
        result = runner.run(_run(driver, args))
    sys.stdout.write(json.dumps(result) + "\n")
    sys.stdout.flush()
