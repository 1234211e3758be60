"""How fast every page of the console answers on a big database (issue 20: < 300 ms with 1,000,000
jobs and 100,000 processes).

    .venv/bin/python -m bench.console_pages [--jobs 1000000] [--processes 100000] [--runs 5]
                                            [--journal-rows N] [--days 7]   (BENCH_DSN, or an embedded server)

A fresh database (`console_bench_<hex>`, dropped afterwards) gets `--jobs` rows in dl_jobs over
five queues, each with every status (60 % succeeded, 20 % failed with twenty error texts, a tenth
of those held, 5 % canceled, 15 % queued of which a third delayed), their stats rollup, and
`--processes` processes in
one namespace (5 % in error) with three history events each. Then every page is asked for through
the HTTP app in process (httpx's ASGI transport: the console's reads, templates and the App, no
network), once to warm up and `--runs` times measured; the table shows the median and the slowest.
The jobs page renders its results first and then loads its count (`/ui/jobs/count`): both are timed.
Beside the pages, the HTTP API's reads of the same things: a job, its journal, the search, the top
errors.

A big journal (issue 39): `--journal-rows N` spreads the jobs' creation over the last `--days` days
(7: the default retention of succeeded jobs) instead of 0.05 s apart, gives the journal a partition
per day as the partition duty would have made them (the migration's first partition ends before
the oldest job), and writes N journal rows, N / jobs per job, each at its job's creation plus 0.2 s
per row, in one statement per day (foreign-key checks off for the load: every row's job exists by
construction; `session_replication_role` needs a superuser). Job ids are time-ordered, as the App
makes them.
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
from datetime import UTC, datetime, timedelta
from pathlib import Path

import asyncpg
import httpx

from bench.pg import start_server, with_database

RESULTS = Path(__file__).resolve().parent / "results"
TARGET_MS = 300


# A time-ordered id (the App's are: the creation's milliseconds first), unique per g.
JOB_ID = "(lpad(to_hex((extract(epoch FROM {t}) * 1000)::bigint), 12, '0') || substr(md5(g::text), 1, 20))::uuid"
CREATED = "now() - make_interval(secs => ($1::int - g) * $2::float8)"


async def fill(dsn: str, jobs: int, processes: int, spacing: float) -> None:
    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute("""
            INSERT INTO dl_jobs (job_id, queue, task, lock_key, status, attempt, max_attempts, priority, args,
                                 created_at, available_at, started_at, finished_at, error, held_at)
            SELECT __JOB_ID__, 'q' || ((g / 20) % 5), 'task.' || (g % 7), 'key:' || (g % 50000),
                   s.status::dl_status, CASE WHEN s.status = 'queued' THEN 0 ELSE 1 END, 3, g % 10,
                   jsonb_build_object('customer', g % 1000, 'rows', g % 97),
                   __CREATED__,
                   CASE WHEN s.status = 'queued' AND g % 3 = 0 THEN now() + interval '1 hour'
                        ELSE __CREATED__ END,
                   CASE WHEN s.status <> 'queued' THEN __CREATED__ END,
                   CASE WHEN s.status IN ('succeeded', 'failed', 'canceled')
                        THEN __CREATED__ + interval '1 second' END,
                   CASE WHEN s.status = 'failed'
                        THEN 'RuntimeError: boom ' || ((g / 20) % 20) || E'\\n  at step ' || g END,
                   CASE WHEN s.status = 'failed' AND (g / 20) % 10 = 0 THEN now() END
            FROM generate_series(1, $1::int) g
            CROSS JOIN LATERAL (SELECT CASE WHEN g % 20 < 12 THEN 'succeeded' WHEN g % 20 < 16 THEN 'failed'
                                            WHEN g % 20 < 17 THEN 'canceled' ELSE 'queued' END AS status) s
        """.replace("__JOB_ID__", JOB_ID.format(t=CREATED)).replace("__CREATED__", CREATED), jobs, spacing)
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


async def journal_partitions(dsn: str, days: int) -> None:
    """A partition per UTC day from `days` + 1 days ago to 3 days ahead; the migration's first
    partition (from MINVALUE) ends where they begin."""
    from dataloader.retention import partitions as parts

    first = parts.floor_boundary(datetime.now(UTC), parts.DAY) - (days + 1) * parts.DAY
    conn = await asyncpg.connect(dsn)
    try:
        async with conn.transaction():
            await conn.execute("ALTER TABLE dl_job_events DETACH PARTITION dl_job_events_p_legacy")
            await conn.execute("ALTER TABLE dl_job_events ATTACH PARTITION dl_job_events_p_legacy "
                               f"FOR VALUES FROM (MINVALUE) TO ('{first.isoformat()}')")
        for n in range(days + 5):
            start = first + n * parts.DAY
            await conn.execute("SELECT dl_journal_attach_partition($1, $2, $3)",
                               parts.partition_name(start, parts.DAY), start, start + parts.DAY)
    finally:
        await conn.close()


async def fill_journal(dsn: str, rows: int, days: int) -> int:
    """`rows` journal rows over the jobs (rows / jobs each), one statement per day of creation."""
    conn = await asyncpg.connect(dsn)
    try:
        jobs = await conn.fetchval("SELECT count(*) FROM dl_jobs")
        per_job = max(1, round(rows / jobs))
        await conn.execute("SET session_replication_role = replica")
        for day in range(days + 1, -1, -1):
            started = time.perf_counter()
            status = await conn.execute("""
                INSERT INTO dl_job_events (job_id, queue, kind, ts, payload)
                SELECT j.job_id, j.queue, k.kind, j.created_at + make_interval(secs => k.n * 0.2),
                       jsonb_build_object('attempt', 1, 'n', k.n)
                FROM dl_jobs j,
                     LATERAL (SELECT n, (ARRAY['queued', 'picked', 'progress', 'progress', 'succeeded'])[1 + n % 5]
                                        AS kind
                              FROM generate_series(0, $1::int - 1) AS n) AS k
                WHERE j.created_at >= date_trunc('day', now() AT TIME ZONE 'UTC') AT TIME ZONE 'UTC'
                                      - make_interval(days => $2::int)
                  AND j.created_at < date_trunc('day', now() AT TIME ZONE 'UTC') AT TIME ZONE 'UTC'
                                     - make_interval(days => $2::int - 1)
            """, per_job, day)
            seconds = time.perf_counter() - started
            print(f"journal: day -{day}: {status.split()[-1]} rows in {seconds:.0f} s", flush=True)
        await conn.execute("RESET session_replication_role")
        await conn.execute("VACUUM ANALYZE dl_job_events")
        return await conn.fetchval("SELECT count(*) FROM dl_job_events")
    finally:
        await conn.close()


def pages(job_id: str, operation_id: str, process_id: str) -> dict[str, str]:
    day_ago = datetime.now(UTC) - timedelta(days=1)
    return {
        "overview": "/ui/",
        "jobs (no filter)": "/ui/jobs",
        "jobs queue+failed": "/ui/jobs?queue=q1&status=failed",
        "jobs error text": "/ui/jobs?error=*boom+7*&status=failed",
        "jobs error text, no match": "/ui/jobs?error=*no+such+error*&status=failed",
        "jobs of an error group, 24 h (the errors page's link)":
            "/ui/jobs?queue=q2&status=failed&status=lost&error=RuntimeError:+boom+7*&finished_from=24h",
        "jobs lock_key prefix": "/ui/jobs?lock_key_prefix=key:123",
        "jobs args contain": "/ui/jobs?args_contains=%7B%22customer%22%3A+42%7D",
        "jobs held, last 2h": "/ui/jobs?held=yes&created_from=2h",
        "job": f"/ui/jobs/{job_id}",
        "jobs count: queue+failed": "/ui/jobs/count?queue=q1&status=failed",
        "jobs count: error text": "/ui/jobs/count?error=*boom+7*&status=failed",
        "jobs count: error text, no match": "/ui/jobs/count?error=*no+such+error*&status=failed",
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
        "API: a job": f"/api/v1/jobs/{job_id}/status",
        "API: a job's journal": f"/api/v1/jobs/{job_id}/events",
        "API: top errors (1h)": "/api/v1/stats/errors",
        "API: top errors (24h)": f"/api/v1/stats/errors?since={day_ago:%Y-%m-%dT%H:%M:%SZ}",
    }


# POST /api/v1/search bodies: the same searches as the jobs page's
SEARCHES = {
    "API: search queue+failed": {"queues": ["q1"], "statuses": ["failed"]},
    "API: search error text": {"error": "*boom 7*", "statuses": ["failed"]},
    "API: search error text, no match": {"error": "*no such error*", "statuses": ["failed"]},
    "API: search args contain": {"args_contains": {"customer": 42}},
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
                requests = [(name, "GET", path, None) for name, path in
                            pages(job_id, str(operation.id), f"p-{max(processes // 2, 1):07d}").items()]
                requests += [(name, "POST", "/api/v1/search", body) for name, body in SEARCHES.items()]
                for name, method, path, body in requests:
                    first = await http.request(method, path, json=body)
                    if first.status_code != 200:
                        raise SystemExit(f"bench: {path} answered {first.status_code}: {first.text[:500]}")
                    times = []
                    for _ in range(runs):
                        started = time.perf_counter()
                        answer = await http.request(method, path, json=body)
                        times.append((time.perf_counter() - started) * 1000)
                        assert answer.status_code == 200
                    results[name] = {"median_ms": round(statistics.median(times), 1), "max_ms": round(max(times), 1)}
                    print(f"{name:30} median {results[name]['median_ms']:8.1f} ms   "
                          f"max {results[name]['max_ms']:8.1f} ms", flush=True)
        finally:
            await api.close()
    return results


async def _journal_sizes(dsn: str) -> dict[str, object]:
    conn = await asyncpg.connect(dsn)
    try:
        row = await conn.fetchrow("""
            SELECT count(*) AS partitions, sum(pg_relation_size(relid))::bigint AS heap,
                   sum(pg_indexes_size(relid))::bigint AS indexes
            FROM pg_partition_tree('dl_job_events') WHERE isleaf""")
        return {"partitions": row["partitions"], "heap_gb": round(row["heap"] / 2**30, 2),
                "indexes_gb": round(row["indexes"] / 2**30, 2), "server": await conn.fetchval("SHOW server_version")}
    finally:
        await conn.close()


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=1_000_000)
    parser.add_argument("--processes", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--journal-rows", type=int, default=0)
    parser.add_argument("--days", type=int, default=7)
    args = parser.parse_args()
    server = start_server()
    admin = server.admin_dsn
    name = f"console_bench_{uuid.uuid4().hex[:8]}"
    conn = await asyncpg.connect(admin)
    await conn.execute(f'CREATE DATABASE "{name}"')
    await conn.close()
    dsn = with_database(admin, name)
    try:
        from dataloader.storage import migrate

        await migrate.upgrade(dsn)
        started = time.perf_counter()
        journal = 0
        if args.journal_rows:
            await journal_partitions(dsn, args.days)
        await fill(dsn, args.jobs, args.processes, args.days * 86400 / args.jobs if args.journal_rows else 0.05)
        print(f"filled {args.jobs:,} jobs and {args.processes:,} processes in {time.perf_counter() - started:.0f} s",
              flush=True)
        if args.journal_rows:
            started = time.perf_counter()
            journal = await fill_journal(dsn, args.journal_rows, args.days)
            sizes = await _journal_sizes(dsn)
            print(f"filled {journal:,} journal rows in {time.perf_counter() - started:.0f} s: {sizes}", flush=True)
        results = await measure(dsn, args.runs, args.processes)
    finally:
        conn = await asyncpg.connect(admin)
        await conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        await conn.close()
        server.stop()
    slow = {k: v for k, v in results.items() if v["median_ms"] > TARGET_MS}
    print("\n| page | median ms | max ms |\n|---|---|---|")
    for page, value in results.items():
        print(f"| {page} | {value['median_ms']} | {value['max_ms']} |")
    print(f"\nover {TARGET_MS} ms (median): {', '.join(slow) or 'none'}")
    RESULTS.mkdir(exist_ok=True)
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    path = RESULTS / f"console-{stamp}.json"
    path.write_text(json.dumps({"jobs": args.jobs, "processes": args.processes, "runs": args.runs,
                                "journal_rows": journal, "journal_sizes": sizes if journal else None,
                                "load_average": os.getloadavg(), "pages": results}, indent=2))
    print(f"results: {path}")


if __name__ == "__main__":
    asyncio.run(main())
