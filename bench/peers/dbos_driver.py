"""DBOS Transact (PyPI `dbos`) for `python -m bench workflows`, run with bench/.dbos-venv's python.

Actions (each prints one JSON line last):
- `install`: DBOS launches once against the database (it creates its `dbos` schema) and stops.
- `enqueue --kind K --count N [--steps S]`: `DBOSClient.enqueue` once per workflow, one call
  after another, onto queue `bench` (DBOS's client: it does not launch DBOS, it inserts the
  workflow's ENQUEUED row). Timed around the loop.
- `worker --concurrency C --poll P`: `DBOS.launch()` with queue `bench` (`worker_concurrency=C`,
  `polling_interval_sec=P`) and `bench-parent` (the fan-out's parent), then runs until SIGTERM.
  Workflows and steps are plain `def`s, as DBOS runs them: each workflow in a thread of its
  executor. executor_id "local" (DBOS's default): a new worker recovers the PENDING workflows of
  a killed one at launch.
- `fanout --children N`: enqueue the parent on `bench-parent` and wait for its result with
  `handle.get_result(polling_interval_sec=0.02)`.

Kinds: `three` (3 no-op steps), `steps` (S no-op steps), `plain` (a queued no-op workflow with no
step: DBOS's "job"), `slow` (S steps, each appending `workflow_id step pid` to BENCH_MARKS_FILE
with one os.write, then sleeping 20 ms), `child` (1 no-op step).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import threading
import time

from dbos import DBOS, DBOSClient, Queue

APP = "bench"
QUEUE = "bench"
PARENT_QUEUE = "bench-parent"
SLOW_STEP_SEC = 0.02


@DBOS.step(name="noop_step")
def noop_step(i: int) -> int:
    return i


@DBOS.step(name="slow_step")
def slow_step(i: int) -> int:
    path = os.environ.get("BENCH_MARKS_FILE")
    if path:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, f"{DBOS.workflow_id} {i} {os.getpid()}\n".encode())
        finally:
            os.close(fd)
    time.sleep(SLOW_STEP_SEC)
    return i


@DBOS.workflow(name="three")
def three(_: int) -> int:
    return noop_step(0) + noop_step(1) + noop_step(2)


@DBOS.workflow(name="steps")
def steps(count: int) -> int:
    return sum(noop_step(i) for i in range(count))


@DBOS.workflow(name="slow")
def slow(count: int) -> int:
    return sum(slow_step(i) for i in range(count))


@DBOS.workflow(name="plain")
def plain(_: int) -> int:
    return 0


@DBOS.workflow(name="child")
def child(i: int) -> int:
    return noop_step(i)


_children: Queue | None = None


@DBOS.workflow(name="fanout")
def fanout(count: int) -> int:
    # The documented fan-out: enqueue every child on the queue, then join each handle's result.
    assert _children is not None
    handles = [_children.enqueue(child, i) for i in range(count)]
    return sum(h.get_result() for h in handles)


def _config(dsn: str) -> dict:
    return {"name": APP, "system_database_url": dsn, "run_admin_server": False, "log_level": "WARNING"}


def _launch(dsn: str, concurrency: int, poll: float) -> None:
    global _children
    DBOS(config=_config(dsn))  # type: ignore[arg-type]
    DBOS.launch()
    # DBOS 3.4: queues live in the system database, registered after launch (its worker thread
    # picks up a new queue within a second).
    _children = DBOS.register_queue(QUEUE, worker_concurrency=concurrency, polling_interval_sec=poll,
                                    on_conflict="always_update")
    DBOS.register_queue(PARENT_QUEUE, worker_concurrency=4, polling_interval_sec=poll, on_conflict="always_update")


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
    parser.add_argument("--timeout", type=float, default=300)
    args = parser.parse_args()
    dsn = args.dsn.replace("postgresql://", "postgresql+psycopg://", 1)

    if args.action == "install":
        _launch(dsn, args.concurrency, args.poll)
        DBOS.destroy()
        print(json.dumps({"ok": True}))
    elif args.action == "enqueue":
        client = DBOSClient(system_database_url=dsn, application_name=APP)
        arg = args.steps if args.kind in ("steps", "slow") else 0
        started = time.perf_counter()
        for _ in range(args.count):
            client.enqueue({"queue_name": QUEUE, "workflow_name": args.kind}, arg)
        seconds = time.perf_counter() - started
        client.destroy()
        print(json.dumps({"count": args.count, "seconds": seconds}))
    elif args.action == "fanout":
        client = DBOSClient(system_database_url=dsn, application_name=APP)
        started = time.perf_counter()
        handle = client.enqueue({"queue_name": PARENT_QUEUE, "workflow_name": "fanout"}, args.children)
        value = handle.get_result(polling_interval_sec=0.02)
        seconds = time.perf_counter() - started
        client.destroy()
        print(json.dumps({"run_id": handle.get_workflow_id(), "result": value, "seconds": seconds}))
    else:
        stop = threading.Event()
        signal.signal(signal.SIGTERM, lambda *_: stop.set())
        _launch(dsn, args.concurrency, args.poll)
        print("ready", flush=True)
        stop.wait()
        DBOS.destroy(workflow_completion_timeout_sec=5)


if __name__ == "__main__":
    main()
