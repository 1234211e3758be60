"""The command line every system's driver script shares (stdlib only; runs in either venv).

A driver wraps one system's public API in a few async methods; this module turns them into the
actions the harness calls, times them inside the driver process (so process start-up and imports
are not part of an enqueue rate), and prints one JSON object as the last line of stdout.

    driver.py install        --dsn D
    driver.py enqueue-single --dsn D --n N
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
    async def enqueue_many(self, keys: range, task: str, serial: bool) -> None: ...
    async def worker(self, concurrency: int, serial: bool) -> None: ...


def _parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    parser.add_argument("action", choices=["install", "enqueue-single", "enqueue-batch", "prefill",
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
        if args.action == "enqueue-single":
            started = time.perf_counter()
            for key in range(args.start, args.start + args.n):
                await driver.enqueue_one(key, args.task)
            return {"seconds": time.perf_counter() - started, "n": args.n}
        if args.action in ("enqueue-batch", "prefill"):
            started = time.perf_counter()
            for first in range(args.start, args.start + args.n, args.batch):
                await driver.enqueue_many(range(first, min(first + args.batch, args.start + args.n)),
                                          args.task, args.serial)
            return {"seconds": time.perf_counter() - started, "n": args.n}
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
