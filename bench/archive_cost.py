"""What archival costs (issue 39): the bytes a job takes in the archive, and the CPU the pruner's
export adds to deleting it.

    .venv/bin/python -m bench.archive_cost [--jobs 50000] [--rounds 2]   (BENCH_DSN, or an embedded server)

A node in this process drains `--jobs` no-op jobs (each leaves its real journal: created, picked,
succeeded) and then `app.prune(older_than=0)` deletes them, alternately without an archive and with
`DL_ARCHIVE_URL` a local directory (the export: jobs and journal read in the batch's transaction,
gzip JSON lines written, then the manifest entry), `--rounds` times each. Measured per prune: wall
time, this process's CPU, the server's CPU (when it runs here), and with the archive the files'
bytes. Writes bench/results/archive-cost-<UTC>.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import asyncpg
import psutil

from bench.pg import fresh_database, read_settings, start_server
from bench.sustained import postmaster_pid, server_cpu
from dataloader import App, Queue, Settings

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
QUEUE = "archive-bench"


def tree_bytes(root: Path) -> int:
    return sum(p.stat().st_size for p in root.rglob("*") if p.is_file())


async def drain(dsn: str, jobs: int) -> None:
    settings = Settings(db_dsn=dsn, workers=[Queue(QUEUE, 32)], retention_enabled=False, stats_enabled=False,
                        log_level="WARNING")
    async with App(settings) as app, app.running():
        for start in range(0, jobs, 1000):
            await app.enqueue_many([{"task": "dl.noop", "queue": QUEUE} for _ in range(min(1000, jobs - start))])
        conn = await asyncpg.connect(dsn)
        try:
            # progress is read from the database, as the drain measures read it: nothing here signals it
            while await conn.fetchval("SELECT count(*) FROM dl_jobs WHERE status <> 'succeeded'"):  # noqa: ASYNC110
                await asyncio.sleep(0.2)
        finally:
            await conn.close()


async def prune_once(dsn: str, archive_url: str | None, postmaster: int | None) -> dict[str, Any]:
    settings = Settings(db_dsn=dsn, workers=[], retention_enabled=False, stats_enabled=False, archive_url=archive_url,
                        log_level="WARNING")
    me = psutil.Process()
    async with App(settings) as app:
        cpu0, server0 = sum(me.cpu_times()[:2]), server_cpu(postmaster) if postmaster else float("nan")
        started = time.perf_counter()
        report = await app.prune(older_than=0, batch_size=1000)
        seconds = time.perf_counter() - started
        cpu1, server1 = sum(me.cpu_times()[:2]), server_cpu(postmaster) if postmaster else float("nan")
    return {"archive": archive_url is not None, "jobs": report.total, "seconds": round(seconds, 3),
            "client_cpu_us_per_job": round((cpu1 - cpu0) * 1e6 / max(report.total, 1), 1),
            "server_cpu_us_per_job": round((server1 - server0) * 1e6 / max(report.total, 1), 1)}


async def main(args: argparse.Namespace) -> dict[str, Any]:
    server = start_server()
    out: dict[str, Any] = {"args": vars(args), "load_average_before": os.getloadavg(), "runs": []}
    try:
        out["server"] = await read_settings(server)
        async with fresh_database(server, "archive_cost") as dsn:
            conn = await asyncpg.connect(dsn)
            try:
                from dataloader.storage import migrate

                await migrate.upgrade(dsn)
                postmaster = postmaster_pid(await conn.fetchval("SHOW data_directory")) if server.local else None
            finally:
                await conn.close()
            for _ in range(args.rounds):
                for archived in (False, True):
                    await drain(dsn, args.jobs)
                    conn = await asyncpg.connect(dsn)
                    try:
                        journal = await conn.fetchval("SELECT count(*) FROM dl_job_events")
                    finally:
                        await conn.close()
                    with tempfile.TemporaryDirectory(prefix="dl-archive-bench-") as directory:
                        run = await prune_once(dsn, f"file://{directory}" if archived else None, postmaster)
                        run["journal_rows"] = journal
                        if archived:
                            run["archive_bytes"] = tree_bytes(Path(directory))
                            run["archive_bytes_per_job"] = round(run["archive_bytes"] / max(run["jobs"], 1), 1)
                    out["runs"].append(run)
                    print(json.dumps(run), flush=True)
    finally:
        server.stop()
    for archived in (False, True):
        mine = [r for r in out["runs"] if r["archive"] is archived]
        out["archived" if archived else "plain"] = {
            k: statistics.median(r[k] for r in mine)
            for k in ("seconds", "client_cpu_us_per_job", "server_cpu_us_per_job", *(
                ("archive_bytes_per_job",) if archived else ()))}
    out["load_average_after"] = os.getloadavg()
    return out


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=50_000)
    parser.add_argument("--rounds", type=int, default=2)
    result = asyncio.run(main(parser.parse_args()))
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"archive-cost-{datetime.now(UTC):%Y%m%dT%H%M%SZ}.json"
    path.write_text(json.dumps(result, indent=2, default=str) + "\n")
    print("plain", json.dumps(result["plain"]), file=sys.stderr)
    print("archived", json.dumps(result["archived"]), file=sys.stderr)
    print(f"bench: written to {path.relative_to(ROOT)}", file=sys.stderr)
