"""A sustained run (issue 39): a steady rate for half an hour with retention of a few minutes, to
see that the queue's tables stop growing after warm-up, that the wait for a worker stays flat, and
what retention costs when the journal goes by dropping partitions against DELETE by cascade.

    .venv/bin/python -m bench.sustained [--rate 2100] [--minutes 30] [--keep 180] [--interval 60]
                                        [--mode drop|delete] [--workers 2] [--concurrency 32]
                                        (BENCH_DSN, or an embedded server)

Real worker processes (`python -m dataloader worker`, no-op jobs, their own pruner and partition
duty off; everything else as shipped: stats rollup, storage sampler, reaper) drain a queue that
this process feeds at `--rate` jobs per second by `App.enqueue_many` batches every 100 ms. This
process is also the retention, compressed the way bench/queue_health.py compresses it, with the
engine's own functions: every 10 s it creates the journal's partitions ahead
(`partitions.create_ahead`, `--interval` seconds wide instead of a day or an hour), and then

  drop    drops the partitions wholly older than `--keep` (`partitions.drop_due`) and runs the
          pruner (`pruner.prune`) with the journal floor, so the jobs go after their journal rows
          went by DROP (the shipped default, at days instead of minutes);
  delete  runs the pruner, the journal by ON DELETE CASCADE (DL_JOURNAL_PARTITIONS_DROP=false), and
          then drops the partitions past `--keep` that the cascade emptied (`partitions.drop_emptied`,
          as the duty does in that mode).

The product's shortest retention is an hour and its narrowest partition an hour: compressed here so
that a half-hour run holds ten retention periods.

Sampled every `--sample` seconds: the jobs finished per second, the backlog, the wait for a worker
(started_at - available_at of the jobs created in the window before last: p50, p99, max), heap /
index / TOAST bytes and live / dead tuples of dl_jobs and of the journal (its partitions summed),
the journal's partition count, autovacuum runs, WAL bytes, and CPU seconds of the workers, of the
whole PostgreSQL server (every backend, autovacuum, checkpointer, WAL writer; when it runs here)
and of this process, and of the retention's own backend. The server's log (when it can be read)
gives each autovacuum run of the run's tables with its CPU and WAL (`log_autovacuum_min_duration`
is set to 0 on dl_jobs and the journal's DEFAULT partition; a partition made during the run logs
at the server's setting). Writes
bench/results/sustained-<mode>-<UTC>.json and prints a summary of the warm and the steady halves.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import asyncpg
import psutil

from bench import procs
from bench.pg import fresh_database, read_settings, start_server
from bench.queue_health import produce
from bench.systems import DATALOADER
from dataloader import App, Settings
from dataloader.retention import partitions as parts
from dataloader.retention.policy import RetentionPolicy
from dataloader.retention.pruner import prune, stats_lag_floor

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
QUEUE = "bench"
RETENTION_EVERY_SEC = 10.0

SIZES = """
WITH rels AS (
  SELECT 'jobs' AS t, 'dl_jobs'::regclass AS relid
  UNION ALL
  SELECT 'journal', p.relid FROM pg_partition_tree('dl_job_events') AS p WHERE p.isleaf
)
SELECT r.t,
       sum(pg_relation_size(r.relid))::bigint AS heap,
       sum(pg_indexes_size(r.relid))::bigint AS indexes,
       sum(COALESCE(pg_total_relation_size(c.reltoastrelid), 0))::bigint AS toast,
       sum(s.n_live_tup)::bigint AS live, sum(s.n_dead_tup)::bigint AS dead,
       sum(s.autovacuum_count)::bigint AS autovacuums, count(*)::int AS relations
FROM rels r JOIN pg_class c ON c.oid = r.relid JOIN pg_stat_user_tables s ON s.relid = r.relid
GROUP BY r.t
"""
# The jobs created in [now - 2 window, now - window): by then every one of them has started
# unless the workers fell behind. The wait is the claim's latency as a job sees it.
WAITS = """
SELECT count(*) AS jobs, count(started_at) AS started,
       percentile_cont(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM started_at - available_at)::float8) AS p50,
       percentile_cont(0.99) WITHIN GROUP (ORDER BY extract(epoch FROM started_at - available_at)::float8) AS p99,
       max(extract(epoch FROM started_at - available_at))::float8 AS worst
FROM dl_jobs WHERE created_at >= now() - 2 * $1::float8 * interval '1 second'
               AND created_at < now() - $1::float8 * interval '1 second'
"""
BACKLOG = "SELECT count(*) FROM dl_jobs WHERE status IN ('queued', 'running')"
AUTOVACUUM = re.compile(r'automatic (vacuum|analyze) of table "(?P<db>[^.]+)\.[^.]+\.(?P<table>[^"]+)"')
CPU = re.compile(r"CPU: user: (?P<user>[\d.]+) s, system: (?P<system>[\d.]+) s, elapsed: (?P<elapsed>[\d.]+) s")
WAL = re.compile(r"WAL usage: \d+ records, \d+ full page images, (?P<bytes>\d+) bytes")


def server_log(explicit: str | None, current: str | None, data_directory: str, major: str) -> Path | None:
    """Where the server writes its log: --server-log, pg_current_logfile() (relative to the data
    directory), or Debian's pg_ctlcluster file; None when none can be read."""
    for candidate in (explicit, current and str(Path(data_directory, current)),
                      f"/var/log/postgresql/postgresql-{major}-main.log"):
        if candidate and os.access(candidate, os.R_OK):
            return Path(candidate)
    return None


def autovacuum_runs(text: str, database: str) -> list[dict[str, Any]]:
    """The autovacuum and autoanalyze runs the server logged for this database's tables (each run
    is a LOG line and its indented detail lines), with CPU, elapsed time and WAL bytes."""
    runs: list[dict[str, Any]] = []
    current: dict[str, Any] | None = None
    for line in text.splitlines():
        found = AUTOVACUUM.search(line)
        if found:
            current = None
            if found["db"] == database:
                current = {"kind": found[1], "table": found["table"]}
                runs.append(current)
            continue
        if current is None or not line[:1].isspace():
            current = None if not line[:1].isspace() else current
            continue
        if cpu := CPU.search(line):
            current["cpu_sec"] = round(float(cpu["user"]) + float(cpu["system"]), 3)
            current["elapsed_sec"] = float(cpu["elapsed"])
        if wal := WAL.search(line):
            current["wal_bytes"] = int(wal["bytes"])
    return runs


def postmaster_pid(data_directory: str) -> int | None:
    """The server's postmaster, when it runs on this machine and its pid file can be read."""
    try:
        return int(Path(data_directory, "postmaster.pid").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def cpu_total(pids: list[int]) -> float:
    return sum(procs.tree_cpu(pids).values())


def server_cpu(postmaster: int) -> float:
    """The server's CPU so far: its live processes, and the children the postmaster has reaped
    (autovacuum workers and ended backends come and go between samples)."""
    try:
        times = psutil.Process(postmaster).cpu_times()
    except psutil.NoSuchProcess:
        return float("nan")
    return cpu_total([postmaster]) + times.children_user + times.children_system


class Retention:
    """The compressed retention: partitions ahead, then drop + prune or prune alone."""

    def __init__(self, pool: asyncpg.Pool, mode: str, keep: float, interval: timedelta) -> None:
        self.pool, self.mode, self.keep, self.interval = pool, mode, keep, interval
        self.policy = RetentionPolicy.uniform(keep)
        self.rounds: list[dict[str, Any]] = []

    async def floor(self, now: datetime) -> parts.JournalFloor | None:
        if self.mode != "drop":
            return None
        starts = [p.range_from for p in await parts.list_partitions(self.pool)
                  if not p.is_default and p.range_to is not None]
        oldest = None if any(s is None for s in starts) else min(starts, default=now)  # type: ignore[type-var]
        return parts.JournalFloor(self.keep, oldest, now, self.interval)

    async def round(self) -> dict[str, Any]:
        now = datetime.now(UTC)
        t0 = time.perf_counter()
        tick = await parts.create_ahead(self.pool, now, self.interval, 3)
        out: dict[str, Any] = {"created": len(tick.created), "dropped": 0, "drop_sec": 0.0, "kept_rows": 0}
        if self.mode == "drop":
            t = time.perf_counter()
            for d in await parts.drop_due(self.pool, self.policy, now):
                if d.error:
                    out.setdefault("errors", []).append(d.error)
                else:
                    out["dropped"] += 1
                    out["kept_rows"] += d.kept
            out["drop_sec"] = round(time.perf_counter() - t, 3)
        t = time.perf_counter()
        report = await prune(self.pool, self.policy, batch_size=1000, min_age_sec=await stats_lag_floor(self.pool),
                             journal_floor=await self.floor(now))
        out["pruned"] = report.total
        out["prune_sec"] = round(time.perf_counter() - t, 3)
        if self.mode == "delete":  # the duty's delete mode: a partition the cascade emptied goes
            t = time.perf_counter()
            for d in await parts.drop_emptied(self.pool, now, self.keep):
                if d.error:
                    out.setdefault("errors", []).append(d.error)
                else:
                    out["dropped"] += 1
            out["drop_sec"] = round(time.perf_counter() - t, 3)
        out["sec"] = round(time.perf_counter() - t0, 3)
        self.rounds.append(out)
        return out


async def reshape_legacy(conn: asyncpg.Connection, interval: timedelta) -> None:
    """The migration's first partition runs to the next UTC midnight; end it at the current
    interval's start so the narrow partitions can follow from now (the database is new: empty)."""
    end = parts.floor_boundary(datetime.now(UTC), interval)
    async with conn.transaction():
        await conn.execute("ALTER TABLE dl_job_events DETACH PARTITION dl_job_events_p_legacy")
        await conn.execute("ALTER TABLE dl_job_events ATTACH PARTITION dl_job_events_p_legacy "
                           f"FOR VALUES FROM (MINVALUE) TO ('{end.isoformat()}')")
    await conn.execute("SELECT dl_journal_attach_partition($1, $2, $3)", parts.partition_name(end, interval),
                       end, end + interval)


async def retention_loop(retention: Retention, stop: asyncio.Event) -> None:
    while not stop.is_set():
        await retention.round()
        try:
            await asyncio.wait_for(stop.wait(), RETENTION_EVERY_SEC)
        except TimeoutError:
            pass


def summary(samples: list[dict[str, Any]]) -> dict[str, Any]:
    def med(key: str) -> float | None:
        values = [s[key] for s in samples if s.get(key) is not None]
        return round(statistics.median(values), 3) if values else None

    def last(key: str) -> Any:
        return samples[-1].get(key) if samples else None

    return {"samples": len(samples), "from_t": samples[0]["t"] if samples else None,
            **{k: med(k) for k in ("finished_per_sec", "backlog", "wait_p50_ms", "wait_p99_ms", "wait_max_ms",
                                   "wal_bytes_per_job", "cpu_us_per_job_workers", "cpu_us_per_job_postgres",
                                   "cpu_us_per_job_client")},
            "sizes_min_max": {k: [min(s[k] for s in samples), max(s[k] for s in samples)] for k in (
                "jobs_total_mb", "journal_total_mb", "jobs_dead", "journal_dead", "journal_partitions")}
            if samples else {},
            "autovacuums_jobs": last("jobs_autovacuums")}


async def main(args: argparse.Namespace) -> dict[str, Any]:
    server = start_server()
    interval = timedelta(seconds=args.interval)
    out: dict[str, Any] = {"args": vars(args), "load_average_before": os.getloadavg(), "samples": []}
    workers: list[asyncio.subprocess.Process] = []
    logdir = Path(tempfile.mkdtemp(prefix="dl-sustained-"))
    try:
        out["server"] = await read_settings(server)
        conn = await asyncpg.connect(server.admin_dsn)
        try:
            out["autovacuum"] = {name: await conn.fetchval(f"SHOW {name}") for name in (
                "autovacuum", "autovacuum_naptime", "autovacuum_vacuum_scale_factor", "autovacuum_max_workers",
                "autovacuum_vacuum_cost_limit", "shared_buffers", "max_wal_size")}
        finally:
            await conn.close()
        if out["autovacuum"]["autovacuum"] != "on":
            raise SystemExit("bench: autovacuum is off on this server; a steady state without it is not one "
                             "(ALTER SYSTEM SET autovacuum = on; SELECT pg_reload_conf())")
        async with fresh_database(server, f"sustained_{args.mode}") as dsn:
            app = App(Settings(db_dsn=dsn, workers=[], retention_enabled=False, journal_partitions_enabled=False,
                               stats_enabled=False, log_level="WARNING"))
            await app.open(migrate_schema=True)
            monitor = await asyncpg.connect(dsn)
            retention_pool = await asyncpg.create_pool(dsn, min_size=1, max_size=1)
            try:
                await reshape_legacy(monitor, interval)
                retention_pid = await retention_pool.fetchval("SELECT pg_backend_pid()")
                data_directory = await monitor.fetchval("SHOW data_directory")
                postmaster = postmaster_pid(data_directory) if server.local else None
                log_path = server_log(args.server_log, await monitor.fetchval("SELECT pg_current_logfile()"),
                                      data_directory, (await monitor.fetchval("SHOW server_version")).split(".")[0])
                log_offset = log_path.stat().st_size if log_path else 0
                database = await monitor.fetchval("SELECT current_database()")
                for table in ("dl_jobs", "dl_job_events_default"):
                    await monitor.execute(f"ALTER TABLE {table} SET (log_autovacuum_min_duration = 0)")
                env = DATALOADER.worker_env(dsn, args.concurrency, logdir)
                env.update({"DL_RETENTION_ENABLED": "false", "DL_JOURNAL_PARTITIONS_ENABLED": "false"})
                for i in range(args.workers):
                    workers.append(await procs.spawn(DATALOADER.worker_argv(dsn, args.concurrency, False), env,
                                                     logdir / f"worker-{i}.log"))
                worker_pids = [w.pid for w in workers]
                ready_by = time.monotonic() + 120
                while await monitor.fetchval("SELECT count(*) FROM dl_nodes WHERE state = 'live'") < args.workers:
                    if time.monotonic() > ready_by:
                        raise SystemExit(f"bench: the workers did not come up in 120 s; logs in {logdir}")
                    await asyncio.sleep(0.2)
                retention = Retention(retention_pool, args.mode, args.keep, interval)
                stop = asyncio.Event()
                enqueued = [0]
                tasks = [asyncio.create_task(produce(app, args.rate, stop, enqueued, QUEUE)),
                         asyncio.create_task(retention_loop(retention, stop))]
                me = psutil.Process()
                t0 = time.monotonic()
                prev: dict[str, float] = {}
                end = t0 + args.minutes * 60
                try:
                    while time.monotonic() < end:
                        await asyncio.sleep(args.sample)
                        for task in tasks:
                            if task.done():
                                task.result()  # a failed producer or retention ends the run with its error
                        dead = [w.pid for w in workers if w.returncode is not None]
                        if dead:
                            raise SystemExit(f"bench: worker process(es) {dead} exited; logs in {logdir}")
                        now = time.monotonic()
                        backlog = await monitor.fetchval(BACKLOG)
                        cur = {"t": now, "finished": enqueued[0] - backlog,
                               "wal": float(await monitor.fetchval(
                                   "SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')")),
                               "cpu_workers": cpu_total(worker_pids),
                               "cpu_postgres": server_cpu(postmaster) if postmaster else float("nan"),
                               "cpu_client": sum(me.cpu_times()[:2]),
                               "cpu_retention": procs.cpu_seconds([retention_pid]).get(retention_pid, float("nan"))}
                        row: dict[str, Any] = {"t": round(now - t0, 1), "backlog": backlog,
                                               "load_1m": round(os.getloadavg()[0], 2)}
                        if prev:
                            done = cur["finished"] - prev["finished"]
                            row["finished_per_sec"] = round(done / (now - prev["t"]), 1)
                            row["wal_bytes_per_sec"] = round((cur["wal"] - prev["wal"]) / (now - prev["t"]))
                            if done > 0:
                                row["wal_bytes_per_job"] = round((cur["wal"] - prev["wal"]) / done)
                                for k in ("workers", "postgres", "client"):
                                    row[f"cpu_us_per_job_{k}"] = round(
                                        (cur[f"cpu_{k}"] - prev[f"cpu_{k}"]) * 1e6 / done, 1)
                            row["cpu_retention_sec"] = round(cur["cpu_retention"] - prev["cpu_retention"], 3)
                        prev = cur
                        waits = await monitor.fetchrow(WAITS, args.sample)
                        row["window_jobs"], row["window_started"] = waits["jobs"], waits["started"]
                        for k in ("p50", "p99"):
                            row[f"wait_{k}_ms"] = round(waits[k] * 1000, 2) if waits[k] is not None else None
                        row["wait_max_ms"] = round(waits["worst"] * 1000, 2) if waits["worst"] is not None else None
                        for r in await monitor.fetch(SIZES):
                            t = r["t"]
                            row[f"{t}_heap_mb"] = round(r["heap"] / 2**20, 2)
                            row[f"{t}_index_mb"] = round(r["indexes"] / 2**20, 2)
                            row[f"{t}_toast_mb"] = round(r["toast"] / 2**20, 2)
                            row[f"{t}_total_mb"] = round((r["heap"] + r["indexes"] + r["toast"]) / 2**20, 2)
                            row[f"{t}_live"], row[f"{t}_dead"] = r["live"], r["dead"]
                            row[f"{t}_autovacuums"] = r["autovacuums"]
                            if t == "journal":
                                row["journal_partitions"] = r["relations"]
                        out["samples"].append(row)
                        print(json.dumps(row), flush=True)
                finally:
                    stop.set()
                    await asyncio.gather(*tasks, return_exceptions=True)
                    for w in workers:
                        await procs.stop(w)
                out["retention_rounds"] = retention.rounds
                if log_path:
                    with log_path.open("rb") as f:
                        f.seek(log_offset)
                        runs = autovacuum_runs(f.read().decode(errors="replace"), database)
                    out["autovacuum_runs"] = runs
                    out["autovacuum_by_table"] = {
                        f"{kind}:{table}": {
                            "runs": len(mine), "cpu_sec": round(sum(r.get("cpu_sec", 0) for r in mine), 2),
                            "wal_bytes": sum(r.get("wal_bytes", 0) for r in mine)}
                        for kind, table in sorted({(r["kind"], r["table"]) for r in runs})
                        for mine in [[r for r in runs if (r["kind"], r["table"]) == (kind, table)]]}
                out["retention"] = {
                    "rounds": len(retention.rounds),
                    "pruned": sum(r["pruned"] for r in retention.rounds),
                    "dropped_partitions": sum(r["dropped"] for r in retention.rounds),
                    "prune_sec": round(sum(r["prune_sec"] for r in retention.rounds), 2),
                    "drop_sec": round(sum(r["drop_sec"] for r in retention.rounds), 2),
                    "drop_errors": sum(len(r.get("errors", [])) for r in retention.rounds),
                    "backend_cpu_sec": round(sum(s.get("cpu_retention_sec", 0.0) for s in out["samples"]), 2)}
            finally:
                await retention_pool.close()
                await monitor.close()
                await app.close()
    finally:
        server.stop()
    samples = out["samples"]
    warm = args.keep * 2  # two retention periods: the tables reach their size
    out["warm"] = summary([s for s in samples if s["t"] < warm])
    steady = [s for s in samples if s["t"] >= warm]
    out["steady_first_half"] = summary(steady[: len(steady) // 2])
    out["steady_second_half"] = summary(steady[len(steady) // 2:])
    out["load_average_after"] = os.getloadavg()
    return out


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rate", type=float, default=2100)
    parser.add_argument("--minutes", type=float, default=30)
    parser.add_argument("--keep", type=float, default=180, help="retention of finished jobs, seconds")
    parser.add_argument("--interval", type=float, default=60, help="journal partition width, seconds")
    parser.add_argument("--mode", choices=("drop", "delete"), default="drop")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--sample", type=float, default=10)
    parser.add_argument("--server-log", help="the server's log file, for its autovacuum runs (default: found)")
    result = asyncio.run(main(parser.parse_args()))
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"sustained-{result['args']['mode']}-{datetime.now(UTC):%Y%m%dT%H%M%SZ}.json"
    path.write_text(json.dumps(result, indent=2, default=str) + "\n")
    for key in ("warm", "steady_first_half", "steady_second_half"):
        print(key, json.dumps(result[key]), file=sys.stderr)
    print(json.dumps(result["retention"]), file=sys.stderr)
    print(json.dumps(result.get("autovacuum_by_table")), file=sys.stderr)
    print(f"bench: written to {path.relative_to(ROOT)}", file=sys.stderr)
