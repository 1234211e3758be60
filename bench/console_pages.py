"""How fast every page of the console answers on a big database (issue 20: < 300 ms with 1,000,000
jobs and 100,000 processes).

    BENCH_DSN=postgresql://postgres@127.0.0.1:5432/postgres .venv/bin/python -m bench.console_pages \
        [--jobs 1000000] [--processes 100000] [--runs 5]

A fresh database (`console_bench_<hex>`, dropped afterwards) gets `--jobs` rows in dl_jobs over
five queues, each with every status (60 % succeeded, 20 % failed with twenty error texts, a tenth
of those held, 5 % canceled, 15 % queued of which a third delayed), their stats rollup, and
`--processes` processes in
one namespace (5 % in error) with three history events each. Then every page is asked for through
the HTTP app in process (httpx's ASGI transport: the console's reads, templates and the App, no
network), once to warm up and `--runs` times measured; the table shows the median and the slowest.
The jobs page renders its results first and then loads its count (`/ui/jobs/count`): both are timed.
Results: bench/results/console-<UTC>.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path

import asyncpg
import httpx

from bench.pg import with_database

RESULTS = Path(__file__).resolve().parent / "results"
TARGET_MS = 300


async def fill(dsn: str, jobs: int, processes: int) -> None:
    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute("""
            INSERT INTO dl_jobs (job_id, queue, task, lock_key, status, attempt, max_attempts, priority, args,
                                 created_at, available_at, started_at, finished_at, error, held_at)
            SELECT gen_random_uuid(), 'q' || ((g / 20) % 5), 'task.' || (g % 7), 'key:' || (g % 50000),
                   s.status::dl_status, CASE WHEN s.status = 'queued' THEN 0 ELSE 1 END, 3, g % 10,
                   jsonb_build_object('customer', g % 1000, 'rows', g % 97),
                   now() - make_interval(secs => ($1::int - g) * 0.05),
                   CASE WHEN s.status = 'queued' AND g % 3 = 0 THEN now() + interval '1 hour'
                        ELSE now() - make_interval(secs => ($1::int - g) * 0.05) END,
                   CASE WHEN s.status <> 'queued' THEN now() - make_interval(secs => ($1::int - g) * 0.05) END,
                   CASE WHEN s.status IN ('succeeded', 'failed', 'canceled')
                        THEN now() - make_interval(secs => ($1::int - g) * 0.05) + interval '1 second' END,
                   CASE WHEN s.status = 'failed' THEN 'RuntimeError: boom ' || (g % 20) || E'\\n  at step ' || g END,
                   CASE WHEN s.status = 'failed' AND (g / 20) % 10 = 0 THEN now() END
            FROM generate_series(1, $1::int) g
            CROSS JOIN LATERAL (SELECT CASE WHEN g % 20 < 12 THEN 'succeeded' WHEN g % 20 < 16 THEN 'failed'
                                            WHEN g % 20 < 17 THEN 'canceled' ELSE 'queued' END AS status) s
        """, jobs)
        await conn.execute("""
            INSERT INTO dl_processes (ns, id, status, detail, aux_state, last_event_id)
            SELECT 'bench', 'p-' || lpad(g::text, 7, '0'), CASE WHEN g % 20 = 0 THEN 'error' ELSE 'running' END,
                   CASE WHEN g % 20 = 0 THEN 'RuntimeError: declined' END, jsonb_build_object('step', g % 9), 3
            FROM generate_series(1, $1::int) g
        """, processes)
        await conn.execute("""
            INSERT INTO dl_process_events (ns, process_id, event_id, payload)
            SELECT 'bench', 'p-' || lpad(g::text, 7, '0'), e, jsonb_build_object('kind', 'step', 'n', e)
            FROM generate_series(1, $1::int) g CROSS JOIN generate_series(1, 3) e
        """, processes)
        await conn.execute("VACUUM ANALYZE")
    finally:
        await conn.close()


def pages(job_id: str, operation_id: str, process_id: str) -> dict[str, str]:
    return {
        "overview": "/ui/",
        "jobs (no filter)": "/ui/jobs",
        "jobs queue+failed": "/ui/jobs?queue=q1&status=failed",
        "jobs error text": "/ui/jobs?error=*boom+7*&status=failed",
        "jobs lock_key prefix": "/ui/jobs?lock_key_prefix=key:123",
        "jobs args contain": "/ui/jobs?args_contains=%7B%22customer%22%3A+42%7D",
        "jobs held, last 2h": "/ui/jobs?held=yes&created_from=2h",
        "job": f"/ui/jobs/{job_id}",
        "jobs count: queue+failed": "/ui/jobs/count?queue=q1&status=failed",
        "jobs count: error text": "/ui/jobs/count?error=*boom+7*&status=failed",
        "errors (1h, the default)": "/ui/errors",
        "errors (24h)": "/ui/errors?window=24h",
        "bulk dry run (failed of q1)": "/ui/bulk?queue=q1&status=failed&kind=requeue&count=1",
        "operations": "/ui/operations",
        "operation": f"/ui/operations/{operation_id}",
        "processes": "/ui/processes?ns=bench",
        "processes in error": "/ui/processes?ns=bench&status=error",
        "process": f"/ui/processes/bench/{process_id}",
        "schedules": "/ui/schedules",
        "observers": "/ui/observers",
    }


async def measure(dsn: str, runs: int, processes: int) -> dict[str, dict[str, float]]:
    from dataloader import App, Settings
    from dataloader.api import create_app

    async with App(Settings(db_dsn=dsn, workers=[])) as app:
        await app.rollup_stats()
        job_id = str((await app.search({"statuses": ["failed"]}, limit=1)).jobs[0].id)
        operation = await app.operations.start("cancel", {"queues": ["q4"], "statuses": ["queued"]},
                                               started_by="bench")
        await app.operations.cancel(operation.id, actor="bench")  # no runner here: only its page is read
        api = await app.api_app()
        try:
            transport = httpx.ASGITransport(app=create_app(api.settings, context=api))
            results: dict[str, dict[str, float]] = {}
            async with httpx.AsyncClient(transport=transport, base_url="http://bench", timeout=60) as http:
                for name, path in pages(job_id, str(operation.id), f"p-{max(processes // 2, 1):07d}").items():
                    first = await http.get(path)
                    if first.status_code != 200:
                        raise SystemExit(f"bench: {path} answered {first.status_code}: {first.text[:500]}")
                    times = []
                    for _ in range(runs):
                        started = time.perf_counter()
                        answer = await http.get(path)
                        times.append((time.perf_counter() - started) * 1000)
                        assert answer.status_code == 200
                    results[name] = {"median_ms": round(statistics.median(times), 1), "max_ms": round(max(times), 1)}
                    print(f"{name:30} median {results[name]['median_ms']:8.1f} ms   "
                          f"max {results[name]['max_ms']:8.1f} ms", flush=True)
        finally:
            await api.close()
    return results


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=1_000_000)
    parser.add_argument("--processes", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    admin = os.environ.get("BENCH_DSN", "postgresql://postgres@127.0.0.1:5432/postgres")
    name = f"console_bench_{uuid.uuid4().hex[:8]}"
    conn = await asyncpg.connect(admin)
    await conn.execute(f'CREATE DATABASE "{name}"')
    await conn.close()
    dsn = with_database(admin, name)
    try:
        from dataloader.storage import migrate

        await migrate.upgrade(dsn)
        started = time.perf_counter()
        await fill(dsn, args.jobs, args.processes)
        print(f"filled {args.jobs:,} jobs and {args.processes:,} processes in {time.perf_counter() - started:.0f} s",
              flush=True)
        results = await measure(dsn, args.runs, args.processes)
    finally:
        conn = await asyncpg.connect(admin)
        await conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        await conn.close()
    slow = {k: v for k, v in results.items() if v["median_ms"] > TARGET_MS}
    print("\n| page | median ms | max ms |\n|---|---|---|")
    for page, value in results.items():
        print(f"| {page} | {value['median_ms']} | {value['max_ms']} |")
    print(f"\nover {TARGET_MS} ms (median): {', '.join(slow) or 'none'}")
    RESULTS.mkdir(exist_ok=True)
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    path = RESULTS / f"console-{stamp}.json"
    path.write_text(json.dumps({"jobs": args.jobs, "processes": args.processes, "runs": args.runs,
                                "load_average": os.getloadavg(), "pages": results}, indent=2))
    print(f"results: {path}")


if __name__ == "__main__":
    asyncio.run(main())
