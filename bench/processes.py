"""Processes: how many start per second, and the call round trip under load, against a plain
job's enqueue→finish latency measured in the same run.

    BENCH_DSN=postgresql://postgres@127.0.0.1:5432/postgres .venv/bin/python -m bench.processes \
        [--processes 1000] [--start-concurrency 32] [--timer-sec 5] [--call-rate 50] \
        [--plain-rate 20] [--duration 20]

One `dataloader worker` process serves queue `process:bench` (16 at a time) and queue
`bench-plain` (16 at a time). The driver (this process, no workers) then:

1. starts `--processes` processes with `app.processes.init` from `--start-concurrency` concurrent
   callers: processes started per second = N / (first init sent → last init answered). Each init
   arms a timer `--timer-sec` ahead, and every timeout arms the next: from here on the live
   processes fire timers continuously (N / timer-sec timer steps per second).
2. for `--duration` seconds, at once: calls at `--call-rate` per second to random live processes
   (each from its own task, paced, not waiting for the previous one), and plain `dl.noop` jobs at
   `--plain-rate` per second on queue `bench-plain`.

Reported: the call round trip as the caller sees it (call sent → response returned: insert,
claim, processor, the step's transaction, the NOTIFY back), the call's task time in the database
(task created → finished), a plain job's enqueue→finish (dl_jobs created_at → finished_at, both
database clock), p50/p99 of each, and the ratios call/plain. Timer lateness (due → step start) from
the worker is in its /metrics; here: timer steps done during the window.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import statistics
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import asyncpg

ROOT = Path(__file__).resolve().parent.parent


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    index = min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))
    return ordered[index]


def summary(values: list[float]) -> dict[str, float]:
    return {"n": len(values), "p50_ms": round(percentile(values, 50) * 1000, 2),
            "p99_ms": round(percentile(values, 99) * 1000, 2),
            "mean_ms": round(statistics.fmean(values) * 1000, 2) if values else float("nan")}


def start_worker(dsn: str, timer_sec: float) -> subprocess.Popen[bytes]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DL_", "WORKERS_JSON"))}
    env.update({"DL_DB_DSN": dsn, "DL_PIPELINE_MODULES": "bench.process_kinds", "DL_LOG_LEVEL": "WARNING",
                "WORKERS_JSON": '[{"queue":"bench-plain","concurrency":16}]', "BENCH_TIMER_SEC": str(timer_sec),
                "DL_RETENTION_ENABLED": "false", "DL_STATS_ENABLED": "false",
                "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])})
    return subprocess.Popen([sys.executable, "-m", "dataloader", "worker"], env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)


async def run(args: argparse.Namespace) -> dict[str, Any]:
    os.environ["BENCH_TIMER_SEC"] = str(args.timer_sec)
    import bench.process_kinds  # noqa: F401  (registers the processor here too: the driver calls it)
    from bench.pg import fresh_database, read_settings, start_server
    from dataloader import App, Settings
    from dataloader.storage import migrate

    server = start_server()
    try:
        pg = await read_settings(server)
        async with fresh_database(server, "processes") as dsn:
            await migrate.upgrade(dsn)
            worker = start_worker(dsn, args.timer_sec)
            try:
                async with App(Settings(db_dsn=dsn, db_pool_extra=args.start_concurrency + 40)) as app:
                    await wait_worker(dsn)
                    result = await measure(app, dsn, args)
            finally:
                os.killpg(worker.pid, 15)
                worker.wait(30)
        result["postgres"] = pg
        return result
    finally:
        server.stop()


async def wait_worker(dsn: str) -> None:
    """Until the worker serves the process queue (a probe process answers)."""
    from dataloader import App, Settings

    async with App(Settings(db_dsn=dsn)) as probe:
        deadline = time.monotonic() + 60
        while True:
            try:
                await probe.processes.init("bench", "probe", {}, timeout=2)
                return
            except Exception:
                if time.monotonic() > deadline:
                    raise
                await asyncio.sleep(0.2)


async def measure(app: Any, dsn: str, args: argparse.Namespace) -> dict[str, Any]:
    ids = [f"p{i}" for i in range(args.processes)]
    queue: asyncio.Queue[str] = asyncio.Queue()
    for pid in ids:
        queue.put_nowait(pid)

    async def starter() -> None:
        while not queue.empty():
            pid = queue.get_nowait()
            await app.processes.init("bench", pid, {}, timeout=120)

    started = time.perf_counter()
    await asyncio.gather(*(starter() for _ in range(args.start_concurrency)))
    start_sec = time.perf_counter() - started

    conn = await asyncpg.connect(dsn)
    try:
        timers_before = await conn.fetchval("SELECT count(*) FROM dl_process_tasks WHERE task_type = 'timeout' "
                                            "AND status = 'finished'")
        call_rtt: list[float] = []
        failures: list[str] = []
        plain_ids: list[Any] = []
        tasks: list[asyncio.Task[None]] = []

        async def one_call(n: int) -> None:
            sent = time.perf_counter()
            try:
                await app.processes.call("bench", random.choice(ids), {"n": n}, timeout=60)
                call_rtt.append(time.perf_counter() - sent)
            except Exception as exc:
                failures.append(repr(exc))

        async def one_plain() -> None:
            job = await app.enqueue("dl.noop", queue="bench-plain")
            plain_ids.append(job.id)

        window_start = datetime.now(UTC)
        loop = asyncio.get_running_loop()
        begin = loop.time()
        calls = plains = 0
        while (now := loop.time()) - begin < args.duration:
            due_calls = int((now - begin) * args.call_rate) + 1
            due_plain = int((now - begin) * args.plain_rate) + 1
            while calls < due_calls:
                tasks.append(asyncio.create_task(one_call(calls)))
                calls += 1
            while plains < due_plain:
                tasks.append(asyncio.create_task(one_plain()))
                plains += 1
            await asyncio.sleep(0.002)
        await asyncio.gather(*tasks)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if not await conn.fetchval("SELECT count(*) FROM dl_jobs WHERE job_id = ANY($1::uuid[]) "
                                       "AND finished_at IS NULL", plain_ids):
                break
            await asyncio.sleep(0.1)
        plain = [r["sec"] for r in await conn.fetch(
            "SELECT extract(epoch FROM finished_at - created_at)::float8 AS sec FROM dl_jobs "
            "WHERE job_id = ANY($1::uuid[]) AND status = 'succeeded'", plain_ids)]
        call_db = [r["sec"] for r in await conn.fetch(
            "SELECT extract(epoch FROM finished_at - created_at)::float8 AS sec FROM dl_process_tasks "
            "WHERE task_type = 'call' AND created_at >= $1 AND status = 'finished'", window_start)]
        timers = await conn.fetchval("SELECT count(*) FROM dl_process_tasks WHERE task_type = 'timeout' "
                                     "AND status = 'finished'") - timers_before
        late = await conn.fetchval(
            "SELECT percentile_cont(0.99) WITHIN GROUP (ORDER BY extract(epoch FROM j.started_at - t.scheduled_at)) "
            "FROM dl_process_tasks t JOIN dl_jobs j ON j.job_id = t.task_id "
            "WHERE t.task_type = 'timeout' AND t.status = 'finished' AND j.started_at >= $1", window_start)
    finally:
        await conn.close()
    rtt, db, pl = summary(call_rtt), summary(call_db), summary(plain)
    return {
        "when": datetime.now(UTC).isoformat(timespec="seconds"),
        "params": vars(args),
        "processes_started_per_sec": round(args.processes / start_sec, 1),
        "start_sec": round(start_sec, 2),
        "call_round_trip": rtt,
        "call_task_in_db": db,
        "plain_job_enqueue_to_finish": pl,
        "ratio_p50_round_trip_vs_plain": round(rtt["p50_ms"] / pl["p50_ms"], 2),
        "ratio_p99_round_trip_vs_plain": round(rtt["p99_ms"] / pl["p99_ms"], 2),
        "ratio_p50_task_in_db_vs_plain": round(db["p50_ms"] / pl["p50_ms"], 2),
        "ratio_p99_task_in_db_vs_plain": round(db["p99_ms"] / pl["p99_ms"], 2),
        "timer_steps_in_window": timers,
        "timer_start_lateness_p99_sec": round(late, 3) if late is not None else None,
        "call_failures": failures[:5],
        "call_failure_count": len(failures),
        "load_average": os.getloadavg(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.processes", description=__doc__.split("\n\n")[0])
    parser.add_argument("--processes", type=int, default=1000)
    parser.add_argument("--start-concurrency", type=int, default=32)
    parser.add_argument("--timer-sec", type=float, default=5.0)
    parser.add_argument("--call-rate", type=float, default=50.0)
    parser.add_argument("--plain-rate", type=float, default=20.0)
    parser.add_argument("--duration", type=float, default=20.0)
    args = parser.parse_args()
    result = asyncio.run(run(args))
    out = ROOT / "bench" / "results" / f"processes-{datetime.now(UTC):%Y%m%dT%H%M%SZ}.json"
    out.write_text(json.dumps(result, indent=2, default=str))
    print(json.dumps(result, indent=2, default=str))
    print(f"written: {out}")


if __name__ == "__main__":
    main()
