"""Absurd (PyPI `absurd-sdk` and `absurdctl`) for `python -m bench workflows`, run with
bench/.absurd-venv's python.

Actions (each prints one JSON line last):
- `install`: `absurdctl init` (the schema's SQL that the `absurdctl` wheel carries, applied with
  `psql`), then `absurdctl create-queue` for `bench` and `bench_parent`: Absurd's documented set-up.
- `enqueue --kind K --count N [--steps S]`: `Absurd.spawn(K, arg, queue="bench")` once per task,
  one call after another (a client that registers no task, so the queue is named, as the SDK
  asks). Timed around the loop.
- `worker --concurrency C --poll P [--claim-timeout T]`: one process, two sync clients (the SDK
  binds a client to one queue): `start_worker(concurrency=C, poll_interval=P)` on `bench` and
  `start_worker(concurrency=4, ...)` on `bench_parent` (the fan-out's parent), each in a thread,
  until SIGTERM. Tasks and steps are plain `def`s run in the SDK's thread pool; each client
  shares one psycopg connection among its threads (the SDK's design). `T` is the claim (lease)
  each run holds, extended at every step; SDK default 120 s.
- `fanout --children N`: spawn the parent on `bench_parent`, then `await_task_result` (the SDK's
  own wait: it polls from 50 ms, doubling up to 1 s).

Kinds: `three` (3 no-op steps), `steps` (S no-op steps), `plain` (a task with no step: Absurd's
"job"), `slow` (S steps `slow:i`, each appending `task_id i pid` to BENCH_MARKS_FILE with one
os.write, then sleeping 20 ms), `child` (1 no-op step). The parent `fanout` spawns its N children
on `bench` inside one step (each with the idempotency key `parent:i`, so a re-run of that step
spawns none twice) and joins them with `ctx.await_task_result` per child: Absurd's documented
way for a parent to wait durably for a child (it must be on another queue than the parent's).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

from absurd_sdk import Absurd, TaskContext

QUEUE = "bench"
PARENT_QUEUE = "bench_parent"
PARENT_CONCURRENCY = 4
SLOW_STEP_SEC = 0.02


def _noop(value: int) -> Any:
    return lambda: value


def _slow_step(ctx: TaskContext, i: int) -> Any:
    def run() -> int:
        path = os.environ.get("BENCH_MARKS_FILE")
        if path:
            fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            try:
                os.write(fd, f"{ctx.task_id} {i} {os.getpid()}\n".encode())
            finally:
                os.close(fd)
        time.sleep(SLOW_STEP_SEC)
        return i
    return run


def register(main: Absurd, parent: Absurd) -> None:
    @main.register_task(name="three")
    def three(_: int, ctx: TaskContext) -> int:
        return sum(ctx.step("noop", _noop(i)) for i in range(3))

    @main.register_task(name="steps")
    def steps(count: int, ctx: TaskContext) -> int:
        return sum(ctx.step("noop", _noop(i)) for i in range(count))

    @main.register_task(name="slow")
    def slow(count: int, ctx: TaskContext) -> int:
        return sum(ctx.step(f"slow:{i}", _slow_step(ctx, i)) for i in range(count))

    @main.register_task(name="plain")
    def plain(_: int, ctx: TaskContext) -> int:
        return 0

    @main.register_task(name="child")
    def child(i: int, ctx: TaskContext) -> int:
        return ctx.step("noop", _noop(i))

    @parent.register_task(name="fanout")
    def fanout(count: int, ctx: TaskContext) -> int:
        def spawn_children() -> list[str]:
            return [str(parent.spawn("child", i, queue=QUEUE, idempotency_key=f"{ctx.task_id}:{i}")["task_id"])
                    for i in range(count)]
        children = ctx.step("spawn-children", spawn_children)
        total = 0
        for task_id in children:
            snapshot = ctx.await_task_result(task_id, queue_name=QUEUE)
            if snapshot.state != "completed":
                raise RuntimeError(f"child {task_id} ended {snapshot.state}")
            total += snapshot.result
        return total


def _absurdctl(*args: str) -> None:
    import subprocess

    subprocess.run([str(Path(sys.executable).parent / "absurdctl"), *args], check=True,
                   stdout=subprocess.DEVNULL)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("action", choices=["install", "enqueue", "worker", "fanout"])
    parser.add_argument("--dsn", required=True)
    parser.add_argument("--kind", default="three")
    parser.add_argument("--count", type=int, default=1)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--children", type=int, default=1000)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--poll", type=float, default=0.05)
    parser.add_argument("--claim-timeout", type=int, default=120)
    parser.add_argument("--timeout", type=float, default=300)
    args = parser.parse_args()

    if args.action == "install":
        _absurdctl("init", "-d", args.dsn)
        for queue in (QUEUE, PARENT_QUEUE):
            _absurdctl("create-queue", queue, "-d", args.dsn)
        print(json.dumps({"ok": True}))
    elif args.action == "enqueue":
        client = Absurd(args.dsn, queue_name=QUEUE)
        arg = args.steps if args.kind in ("steps", "slow") else 0
        started = time.perf_counter()
        for _ in range(args.count):
            client.spawn(args.kind, arg, queue=QUEUE)
        seconds = time.perf_counter() - started
        client.close()
        print(json.dumps({"count": args.count, "seconds": seconds}))
    elif args.action == "fanout":
        client = Absurd(args.dsn, queue_name=PARENT_QUEUE)
        started = time.perf_counter()
        task_id = str(client.spawn("fanout", args.children, queue=PARENT_QUEUE)["task_id"])
        snapshot = client.await_task_result(task_id, timeout=args.timeout)
        seconds = time.perf_counter() - started
        client.close()
        print(json.dumps({"run_id": task_id, "result": snapshot.result, "state": snapshot.state,
                          "seconds": seconds}))
    else:
        main_client = Absurd(args.dsn, queue_name=QUEUE)
        parent_client = Absurd(args.dsn, queue_name=PARENT_QUEUE)
        register(main_client, parent_client)
        stop = threading.Event()
        signal.signal(signal.SIGTERM, lambda *_: stop.set())
        workers = [
            threading.Thread(target=main_client.start_worker, daemon=True, kwargs={
                "concurrency": args.concurrency, "poll_interval": args.poll, "claim_timeout": args.claim_timeout}),
            threading.Thread(target=parent_client.start_worker, daemon=True, kwargs={
                "concurrency": PARENT_CONCURRENCY, "poll_interval": args.poll,
                "claim_timeout": args.claim_timeout}),
        ]
        for thread in workers:
            thread.start()
        print("ready", flush=True)
        stop.wait()
        for client in (main_client, parent_client):
            client.stop_worker()
        for thread in workers:
            thread.join(timeout=5)


if __name__ == "__main__":
    main()
