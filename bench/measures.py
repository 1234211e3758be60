"""The measures. Each one runs on a fresh database per system and per run; what each number times
exactly is written next to it here and in bench/README.md."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import os
import re
import shutil
import socket
import subprocess
import tempfile
import time
import traceback
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import asyncpg

from bench import marks, procs
from bench.pg import Server, database_of, fresh_database
from bench.stats import percentile, summarize
from bench.systems import DATALOADER, ROOT, System, dataloader_src

Metrics = dict[str, float | None]


@dataclass(frozen=True)
class Scale:
    enqueue_single: int = 20_000
    enqueue_batch: int = 100_000
    batch_size: int = 1_000
    processing: int = 100_000
    processing_procs: tuple[int, ...] = (1, 2)  # worker processes of each drain
    concurrency: int = 16
    latency_jobs: int = 500
    latency_interval: float = 0.010
    claim_backlogs: tuple[int, ...] = (10_000, 1_000_000)
    claim_reps: int = 200
    handoff_jobs: int = 200
    # A system that hands a freed key over only at its next poll needs seconds per job; its gaps
    # are then taken from the jobs that ran within this limit (reported as handoff.done).
    handoff_timeout: float = 60.0
    idle_seconds: float = 30.0
    idle_settle: float = 12.0  # > PostgreSQL's 10 s flush interval of an idle backend's stats
    http_requests: int = 10_000  # with wrk: a run of http_requests / 1000 seconds
    http_clients: int = 8
    prune_rows: int = 1_000_000  # old finished jobs (one journal row each) the pruner deletes
    prune_drain: int = 100_000  # jobs drained with and without the pruner running
    prune_batch: int = 1_000
    timeout: float = 300.0  # per run of a measure for one system


QUICK = Scale(enqueue_single=2_000, enqueue_batch=10_000, processing=2_000, latency_jobs=100,
              claim_backlogs=(10_000, 100_000), claim_reps=50, handoff_jobs=50, handoff_timeout=30.0, idle_seconds=5.0,
              idle_settle=2.0, http_requests=500, prune_rows=20_000, prune_drain=2_000, timeout=120.0)


@dataclass
class Context:
    server: Server
    scale: Scale
    workdir: Path  # logs and marks of this invocation
    verbose: bool = False

    def log(self, system: System, what: str) -> Path:
        return self.workdir / f"{system.name}-{what}.log"

    def marks_dir(self, system: System, what: str) -> Path:
        path = Path(tempfile.mkdtemp(prefix=f"{system.name}-{what}-", dir=self.workdir))
        path.chmod(0o777)
        return path


@dataclass
class MeasureResult:
    metrics: dict[str, dict[str, dict[str, Any]]] = field(default_factory=dict)
    info: dict[str, Any] = field(default_factory=dict)
    errors: dict[str, list[str]] = field(default_factory=dict)


async def _driver(ctx: Context, system: System, action: str, dsn: str, *extra: str,
                  marks_dir: Path | None = None, timeout: float | None = None) -> dict[str, Any]:
    return await procs.run_json(system.driver_argv(action, dsn, *extra), system.env(marks_dir),
                                timeout or ctx.scale.timeout, ctx.log(system, "driver"))


async def _repeat(ctx: Context, systems: list[System], runs: int, label: str,
                  one: Callable[[System, int], Awaitable[tuple[Metrics, dict[str, Any]]]]) -> MeasureResult:
    """Run `one` for every system, `runs` times, interleaving systems within each round so slow
    drift of the machine (page cache, autovacuum, thermal) spreads over all of them."""
    samples: dict[str, dict[str, dict[int, float | None]]] = {}
    result = MeasureResult()
    for run in range(runs):
        for system in systems:
            print(f"  {label} run {run + 1}/{runs}: {system.name} ...", end="", flush=True)
            started = time.monotonic()
            try:
                metrics, info = await asyncio.wait_for(one(system, run), ctx.scale.timeout * 2)
            except Exception as exc:
                message = f"run {run + 1}: {type(exc).__name__}: {exc}"
                result.errors.setdefault(system.name, []).append(message)
                print(f" FAILED ({message})", flush=True)
                if ctx.verbose:
                    traceback.print_exc()
                continue
            # The machine may be shared: a high load average marks a run whose numbers include
            # someone else's CPU use.
            info["loadavg_1m"] = round(os.getloadavg()[0], 2)
            shown = ", ".join(f"{k}={_short(v)}" for k, v in metrics.items())
            print(f" {time.monotonic() - started:.1f} s  {shown}  (load {info['loadavg_1m']})", flush=True)
            for key, value in metrics.items():
                samples.setdefault(key, {}).setdefault(system.name, {})[run] = value
            result.info.setdefault(system.name, []).append(info)
    # A run that failed counts as a missing sample of every metric of that system.
    result.metrics = {key: {name: summarize([by_run.get(r) for r in range(runs)])
                            for name, by_run in per_system.items()}
                      for key, per_system in samples.items()}
    return result


def _short(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:.0f}" if abs(value) >= 100 else f"{value:.3g}"


async def _install(ctx: Context, system: System, dsn: str) -> None:
    await _driver(ctx, system, "install", dsn)
    await _checkpoint(dsn)


async def _checkpoint(dsn: str) -> None:
    # Before every timed phase: the dirty pages of the previous run (another system's, maybe) are
    # written now, not by a checkpoint that lands in the middle of this one.
    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute("CHECKPOINT")
    finally:
        await conn.close()


# -- 1. enqueue --------------------------------------------------------------------------------------

async def enqueue(ctx: Context, systems: list[System], runs: int) -> MeasureResult:
    """Single: N enqueue calls one after another from one client (one connection), each its own
    transaction. Batch: M jobs through each system's batch API, `batch_size` per call; one call:
    the same M jobs in a single call of that API. Timed inside
    the driver process around the loop only (connections are opened before the clock starts)."""
    sc = ctx.scale

    async def one(system: System, run: int) -> tuple[Metrics, dict[str, Any]]:
        async with fresh_database(ctx.server, "enqueue") as dsn:
            await _install(ctx, system, dsn)
            single = await _driver(ctx, system, "enqueue-single", dsn, "--n", str(sc.enqueue_single))
        async with fresh_database(ctx.server, "enqueue") as dsn:
            await _install(ctx, system, dsn)
            single_tx = await _driver(ctx, system, "enqueue-single-tx", dsn, "--n", str(sc.enqueue_single))
        async with fresh_database(ctx.server, "enqueue") as dsn:
            await _install(ctx, system, dsn)
            batch = await _driver(ctx, system, "enqueue-batch", dsn, "--n", str(sc.enqueue_batch),
                                  "--batch", str(sc.batch_size))
        async with fresh_database(ctx.server, "enqueue") as dsn:
            await _install(ctx, system, dsn)
            whole = await _driver(ctx, system, "enqueue-batch", dsn, "--n", str(sc.enqueue_batch),
                                  "--batch", str(sc.enqueue_batch))
        metrics: Metrics = {}
        for name, done, n in (("single", single, sc.enqueue_single), ("single_tx", single_tx, sc.enqueue_single),
                              ("batch", batch, sc.enqueue_batch), ("one_call", whole, sc.enqueue_batch)):
            if done.get("unsupported"):
                continue
            metrics[f"enqueue.{name}"] = n / done["seconds"]
            # CPU per job beside each rate: on a shared machine the steadier figure (driver_cli.CpuProbe).
            metrics[f"enqueue.{name}.cpu_client_us"] = done["client_cpu_sec"] / n * 1e6
            if done.get("db_cpu_sec") is not None:
                metrics[f"enqueue.{name}.cpu_db_us"] = done["db_cpu_sec"] / n * 1e6
        return (metrics, {"single_seconds": single["seconds"], "single_tx_seconds": single_tx.get("seconds"),
                          "batch_seconds": batch["seconds"], "one_call_seconds": whole["seconds"]})

    return await _repeat(ctx, systems, runs, "enqueue", one)


# -- 2. processing (and 8. memory) -------------------------------------------------------------------

async def _vacuum_analyze(dsn: str) -> None:
    # Every system gets freshly analyzed tables after the bulk prefill, so no plan depends on
    # whether autovacuum happened to run yet.
    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute("VACUUM ANALYZE")
        await conn.execute("CHECKPOINT")
    finally:
        await conn.close()


async def _start_workers(ctx: Context, system: System, dsn: str, count: int, marks_dir: Path,
                         what: str, serial: bool = False) -> list[asyncio.subprocess.Process]:
    argv = system.worker_argv(dsn, ctx.scale.concurrency, serial)
    env = system.worker_env(dsn, ctx.scale.concurrency, marks_dir)
    return [await procs.spawn(argv, env, ctx.log(system, f"{what}-worker")) for _ in range(count)]


async def _stop_workers(workers: list[asyncio.subprocess.Process]) -> None:
    await asyncio.gather(*(procs.stop(w) for w in workers))


def _check_alive(workers: list[asyncio.subprocess.Process], log: Path) -> None:
    for w in workers:
        if w.returncode is not None:
            tail = log.read_text(errors="replace").strip().splitlines()[-5:] if log.exists() else []
            raise RuntimeError(f"worker {w.pid} exited with {w.returncode}: " + " | ".join(tail))


def _rss_at_progress(samples: list[tuple[float, int, int]], total: int, fraction: float) -> float | None:
    """RSS (MB) at the first sample where `fraction` of the jobs were done."""
    for _t, remaining, rss in samples:
        if (total - remaining) / total >= fraction:
            return rss / 2**20
    return None


class _CpuLedger:
    """CPU seconds spent by the workers (their process trees) and by the bench database's backends
    (autovacuum included, the harness's own excluded), from the spawn to the drain. A backend's CPU
    is read from /proc, so only for a server on this machine; each pid's last reading counts (a
    backend that exits between two samples loses at most one second of its time)."""

    def __init__(self, local: bool, dsn_db: str, own_pid: int) -> None:
        self.local, self._db, self._own = local, dsn_db, own_pid
        self._workers: dict[int, float] = {}
        self._backends: dict[int, float] = {}
        self._marks: list[tuple[int, float, float]] = []

    async def sample(self, conn: asyncpg.Connection, worker_pids: list[int]) -> None:
        self._workers.update(procs.tree_cpu(worker_pids))
        if self.local:
            backends = await conn.fetch("SELECT pid FROM pg_stat_activity WHERE datname = $1 AND pid <> $2",
                                        self._db, self._own)
            self._backends.update(procs.cpu_seconds(r["pid"] for r in backends))

    def mark(self, done: int) -> None:
        """Remember the CPU so far against the jobs done so far (just after a `sample`)."""
        self._marks.append((done, self.worker_seconds, self.db_seconds))

    def steady_us(self, total: int) -> tuple[float | None, float | None]:
        """CPU per job (µs) of the workers and the backends between the first mark with 10 % of the
        jobs done and the last with at most 90 % done: the per-job cost without the start-up (the
        interpreter's imports alone are 0.4-0.7 s, 20-35 µs per job of a 20,000-job drain) and
        the shutdown. None when the drain was too short to have two such marks."""
        inside = [m for m in self._marks if 0.10 * total <= m[0] <= 0.90 * total]
        if len(inside) < 2 or inside[-1][0] == inside[0][0]:
            return None, None
        (d0, w0, b0), (d1, w1, b1) = inside[0], inside[-1]
        jobs = d1 - d0
        return (w1 - w0) * 1e6 / jobs, (b1 - b0) * 1e6 / jobs if self.local else None

    @property
    def worker_seconds(self) -> float:
        return sum(self._workers.values())

    @property
    def db_seconds(self) -> float:
        return sum(self._backends.values())


async def processing(ctx: Context, systems: list[System], runs: int) -> MeasureResult:
    """N no-op jobs are enqueued first (batch API, not timed), then VACUUM ANALYZE; then 1 (or 2)
    worker processes with concurrency C each are spawned and the harness polls every 50 ms whether
    any unfinished job is left. Reported:
      active = N / (last finish - first start), both read from the system's own tables;
      wall   = N / (spawn of the first worker -> the poll that saw no unfinished job), which also
               includes interpreter start-up, connecting, and up to 50 ms of polling slack.
    Memory: RSS of the worker processes and all their children, sampled every 100 ms; with the
    done-count sampled every 200 ms to give RSS at 10/50/90 % of the drain.
    Cost per job, from the spawn of the workers to their exit (start-up and shutdown included):
      tx_per_job  = transactions of the bench database (pg_stat_database, the harness's own
                    polling subtracted) / N: commits, so fsyncs, are what a durable queue pays for;
      wal_per_job = bytes of WAL the whole server wrote (pg_current_wal_lsn) / N;
      cpu_worker_us, cpu_db_us = CPU time of the worker processes and of the bench database's
                    backends (server on this machine only) / N, in microseconds (_CpuLedger).
      cpu_worker_steady_us, cpu_db_steady_us = the same between 10 % and 90 % of the drain
                    (sampled with the done count every 200 ms): the per-job cost without start-up."""
    sc = ctx.scale
    result = MeasureResult()
    for nprocs in sc.processing_procs:
        async def one(system: System, run: int, nprocs: int = nprocs) -> tuple[Metrics, dict[str, Any]]:
            async with fresh_database(ctx.server, "proc") as dsn:
                await _install(ctx, system, dsn)
                await _driver(ctx, system, "prefill", dsn, "--n", str(sc.processing),
                              "--batch", str(sc.batch_size))
                await _vacuum_analyze(dsn)
                marks_dir = ctx.marks_dir(system, "proc")
                conn = await asyncpg.connect(dsn)
                xacts0, lsn0 = await _xacts(ctx.server, database_of(dsn)), await _wal_lsn(ctx.server)
                own = 3  # the harness's own transactions on `conn`: one per statement (+ 3 prepares)
                deadline = procs.Deadline(sc.timeout)
                samples: list[tuple[float, int, int]] = []
                peak = 0
                t0 = time.monotonic()
                workers = await _start_workers(ctx, system, dsn, nprocs, marks_dir, "proc")
                pids = [w.pid for w in workers]
                cpu = _CpuLedger(ctx.server.local, dsn_db=database_of(dsn), own_pid=conn.get_server_pid())
                try:
                    tick = 0
                    while True:
                        _check_alive(workers, ctx.log(system, "proc-worker"))
                        own += 1
                        if await conn.fetchval(system.pending_sql) is None:
                            drained = time.monotonic()
                            break
                        if deadline.passed:
                            left = await conn.fetchval(system.count_sql)
                            raise TimeoutError(f"not drained after {sc.timeout:.0f} s "
                                               f"({sc.processing - left} of {sc.processing} done)")
                        if tick % 2 == 0:
                            rss = procs.tree_rss(pids)
                            peak = max(peak, rss)
                            if tick % 4 == 0:
                                own += 2
                                remaining = await conn.fetchval(system.count_sql)
                                samples.append((time.monotonic() - t0, remaining, rss))
                                await cpu.sample(conn, pids)
                                cpu.mark(sc.processing - remaining)
                        tick += 1
                        await asyncio.sleep(max(0.0, t0 + tick * 0.05 - time.monotonic()))
                    # The drain may end between two progress samples: close the series at 0 left.
                    final = procs.tree_rss(pids)
                    peak = max(peak, final)
                    samples.append((drained - t0, 0, final))
                    own += 2
                    await cpu.sample(conn, pids)
                    span = await conn.fetchrow(system.span_sql)
                finally:
                    await _stop_workers(workers)
                    await conn.close()
                # Every backend of the bench database has exited now, and a backend flushes its
                # statistics on exit; give the last one a moment.
                await asyncio.sleep(1.0)
                xacts = await _xacts(ctx.server, database_of(dsn)) - xacts0 - own
                wal = await _wal_lsn(ctx.server) - lsn0
            wall = drained - t0
            steady_worker, steady_db = cpu.steady_us(sc.processing)
            if span["succeeded"] != sc.processing:
                raise RuntimeError(f"{span['succeeded']} of {sc.processing} jobs succeeded")
            active = (span["last_finish"] - span["first_start"]).total_seconds()
            p = f"p{nprocs}"
            return ({f"processing.{p}.active": sc.processing / active,
                     f"processing.{p}.wall": sc.processing / wall,
                     f"memory.{p}.peak": peak / 2**20,
                     f"memory.{p}.rss10": _rss_at_progress(samples, sc.processing, 0.10),
                     f"memory.{p}.rss50": _rss_at_progress(samples, sc.processing, 0.50),
                     f"memory.{p}.rss90": _rss_at_progress(samples, sc.processing, 0.90),
                     f"processing.{p}.tx_per_job": xacts / sc.processing,
                     f"processing.{p}.wal_per_job": wal / sc.processing,
                     f"processing.{p}.cpu_worker_us": cpu.worker_seconds * 1e6 / sc.processing,
                     f"processing.{p}.cpu_db_us": cpu.db_seconds * 1e6 / sc.processing if cpu.local else None,
                     f"processing.{p}.cpu_worker_steady_us": steady_worker,
                     f"processing.{p}.cpu_db_steady_us": steady_db},
                    {"procs": nprocs, "active_seconds": active, "wall_seconds": wall,
                     "rss_samples": [(round(t, 2), r, round(m / 2**20, 1)) for t, r, m in samples]})

        part = await _repeat(ctx, systems, runs, f"processing x{nprocs} proc", one)
        result.metrics.update(part.metrics)
        result.info[f"procs{nprocs}"] = part.info
        for name, errs in part.errors.items():
            result.errors.setdefault(name, []).extend(f"{nprocs} proc: {e}" for e in errs)
    return result


# -- 3. latency ------------------------------------------------------------------------------------

async def _wait_marks(marks_dir: Path, count: int, timeout: float,
                      workers: list[asyncio.subprocess.Process], log: Path) -> None:
    deadline = procs.Deadline(timeout)
    while marks.count_lines(marks_dir) < count:
        _check_alive(workers, log)
        if deadline.passed:
            raise TimeoutError(f"{marks.count_lines(marks_dir)} of {count} jobs ran within {timeout:.0f} s")
        await asyncio.sleep(0.05)


async def _warm_up(ctx: Context, system: System, dsn: str, marks_dir: Path,
                   workers: list[asyncio.subprocess.Process], what: str) -> None:
    """One job through the worker, so it is up, connected and listening before anything is timed."""
    await _driver(ctx, system, "enqueue-paced", dsn, "--start", "-1", "--n", "1")
    await _wait_marks(marks_dir, 1, 60, workers, ctx.log(system, f"{what}-worker"))


async def latency(ctx: Context, systems: list[System], runs: int) -> MeasureResult:
    """One idle worker (concurrency C), warmed up with one job, then 1 s of quiet. A client enqueues
    K jobs one at a time, 10 ms apart; each job's enqueue time is the client's time.time() right
    before the enqueue call, its start time the handler's time.time() as its first statement.
    Latency = start - enqueue (same machine, same clock), p50/p95/p99 over the K jobs."""
    sc = ctx.scale

    async def one(system: System, run: int) -> tuple[Metrics, dict[str, Any]]:
        async with fresh_database(ctx.server, "latency") as dsn:
            await _install(ctx, system, dsn)
            marks_dir = ctx.marks_dir(system, "latency")
            workers = await _start_workers(ctx, system, dsn, 1, marks_dir, "latency")
            try:
                await _warm_up(ctx, system, dsn, marks_dir, workers, "latency")
                await asyncio.sleep(1.0)
                sent = await _driver(ctx, system, "enqueue-paced", dsn, "--n", str(sc.latency_jobs),
                                     "--interval", str(sc.latency_interval))
                await _wait_marks(marks_dir, sc.latency_jobs + 1, 60, workers,
                                  ctx.log(system, "latency-worker"))
            finally:
                await _stop_workers(workers)
        seen = marks.read_marks(marks_dir)
        lat = [(seen[str(k)][0] - t) * 1000 for k, t in sent["sent"]]
        return ({"latency.p50": percentile(lat, 50), "latency.p95": percentile(lat, 95),
                 "latency.p99": percentile(lat, 99)},
                {"max_ms": max(lat), "min_ms": min(lat)})

    return await _repeat(ctx, systems, runs, "latency", one)


# -- 4. claim cost vs backlog (dataloader) ------------------------------------------------------------

def _backlog_sql(total: int, shape: str) -> str:
    """`total` queued no-op jobs in one INSERT ... SELECT. created_at/available_at increase by 1 ms
    per row (like jobs enqueued over time); in the "delayed" shape 99 % of the rows (every row but
    each 100th, spread through the table) are due in one day, so only 1 % are runnable now."""
    due = ("CASE WHEN i % 100 = 0 THEN now() - interval '2 hours' + i * interval '1 millisecond' "
           "ELSE now() + interval '1 day' END") if shape == "delayed" else \
        "now() - interval '2 hours' + i * interval '1 millisecond'"
    return f"""
        INSERT INTO dl_jobs (job_id, queue, task, args, lock_key, priority, available_at,
                             max_attempts, lease_ttl_sec, created_at, producer)
        SELECT gen_random_uuid(), 'bench', 'dl.noop', '{{}}'::jsonb, i::text, 100, {due},
               5, 60, now() - interval '2 hours' + i * interval '1 millisecond', 'bench'
        FROM generate_series(1, {total}) AS i"""


async def claim(ctx: Context, systems: list[System], runs: int) -> MeasureResult:
    """dataloader only. The engine's own claim statement (storage/queries/claim_job.sql), run by a
    client over asyncpg (prepared, like the worker) inside a transaction that is rolled back, so
    every repetition sees the same backlog; the session advisory lock the claim takes is released
    after each rollback (not timed). Timed: the claim statement's round trip only."""
    sc = ctx.scale
    result = MeasureResult()
    if DATALOADER not in systems:
        return result
    claim_sql, params, source = _claim_statement()
    result.info["statement"] = source
    explains: dict[str, str] = {}
    samples: dict[str, list[float | None]] = {}
    for shape in ("now", "delayed"):
        for total in sc.claim_backlogs:
            key = f"claim.{shape}.{_size_label(total)}"
            print(f"  claim: {total} queued, shape {shape} ...", end="", flush=True)
            try:
                async with fresh_database(ctx.server, "claim") as dsn:
                    await _install(ctx, DATALOADER, dsn)
                    conn = await asyncpg.connect(dsn)
                    try:
                        started = time.monotonic()
                        await conn.execute(_backlog_sql(total, shape), timeout=sc.timeout)
                        await conn.execute("ANALYZE dl_jobs")
                        fill = time.monotonic() - started
                        times = []
                        for _ in range(sc.claim_reps):
                            tx = conn.transaction()
                            await tx.start()
                            t = time.perf_counter()
                            row = await conn.fetchrow(claim_sql, *params)
                            times.append((time.perf_counter() - t) * 1000)
                            await tx.rollback()
                            await conn.execute("SELECT pg_advisory_unlock_all()")
                            if row is None:
                                raise RuntimeError("the claim found no job")
                        if total == max(sc.claim_backlogs):
                            tx = conn.transaction()
                            await tx.start()
                            plan = await conn.fetch("EXPLAIN (ANALYZE, BUFFERS) " + claim_sql, *params)
                            await tx.rollback()
                            await conn.execute("SELECT pg_advisory_unlock_all()")
                            explains[f"{shape}.{_size_label(total)}"] = "\n".join(r[0] for r in plan)
                    finally:
                        await conn.close()
            except Exception as exc:
                result.errors.setdefault(DATALOADER.name, []).append(f"{key}: {type(exc).__name__}: {exc}")
                print(f" FAILED ({exc})", flush=True)
                samples[f"{key}.p50"] = [None]
                continue
            samples[f"{key}.p50"] = [percentile(times, 50)]
            samples[f"{key}.p95"] = [percentile(times, 95)]
            print(f" fill {fill:.1f} s, claim p50 {percentile(times, 50):.2f} ms "
                  f"p95 {percentile(times, 95):.2f} ms", flush=True)
    result.metrics = {k: {DATALOADER.name: summarize(v)} for k, v in samples.items()}
    result.info["explain"] = explains
    result.info["reps"] = sc.claim_reps
    return result


def _claim_statement() -> tuple[str, tuple[Any, ...], str]:
    """The engine's claim SQL from the code under test: claim_job.sql ($1 queue, $2 worker), or its
    batch successor claim_jobs.sql (LIMIT 1 here, the cost of claiming one job; older versions
    took the limit as $3)."""
    queries = dataloader_src() / "dataloader" / "storage" / "queries"
    single, batch = queries / "claim_job.sql", queries / "claim_jobs.sql"
    if single.exists():
        return single.read_text(), ("bench", "bench-claim"), "claim_job.sql"
    if batch.exists():
        text = batch.read_text()
        if "{limit}" in text:  # the LIMIT is written into the statement, one per batch size
            return text.replace("{limit}", "1"), ("bench", "bench-claim"), "claim_jobs.sql with LIMIT 1"
        return text, ("bench", "bench-claim", 1), "claim_jobs.sql with $3 = 1"
    raise FileNotFoundError(f"no claim_job.sql or claim_jobs.sql in {queries}")


def _size_label(total: int) -> str:
    return f"{total // 1_000_000}M" if total >= 1_000_000 and total % 1_000_000 == 0 else f"{total // 1000}k"


# -- 5. serialized handoff -----------------------------------------------------------------------------

async def handoff(ctx: Context, systems: list[System], runs: int) -> MeasureResult:
    """K jobs that must not overlap (dataloader: one lock_key; Procrastinate: one `lock`; PgQueuer:
    an entrypoint with concurrency_limit=1) are enqueued first; then one worker with concurrency C
    starts. Handoff = next handler start - previous handler end (handler clocks, in start order),
    p50/p99 over the gaps. A negative gap would be an overlap and is counted. Bounded by
    handoff_timeout: a slower system is measured on the jobs that ran by then (handoff.done)."""
    sc = ctx.scale

    async def one(system: System, run: int) -> tuple[Metrics, dict[str, Any]]:
        if system.serial_feature is None:
            raise RuntimeError("n/a: no serialization feature")
        async with fresh_database(ctx.server, "handoff") as dsn:
            await _install(ctx, system, dsn)
            await _driver(ctx, system, "prefill", dsn, "--n", str(sc.handoff_jobs), "--task", "mark",
                          "--serial")
            marks_dir = ctx.marks_dir(system, "handoff")
            workers = await _start_workers(ctx, system, dsn, 1, marks_dir, "handoff", serial=True)
            try:
                with contextlib.suppress(TimeoutError):
                    await _wait_marks(marks_dir, sc.handoff_jobs, sc.handoff_timeout, workers,
                                      ctx.log(system, "handoff-worker"))
            finally:
                await _stop_workers(workers)
        runs_ = sorted(marks.read_marks(marks_dir).values())
        if len(runs_) < 3:
            raise TimeoutError(f"only {len(runs_)} of {sc.handoff_jobs} jobs ran in {sc.handoff_timeout:.0f} s")
        gaps = [(b[0] - a[1]) * 1000 for a, b in itertools.pairwise(runs_)]
        return ({"handoff.p50": percentile(gaps, 50), "handoff.p99": percentile(gaps, 99),
                 "handoff.overlaps": float(sum(1 for g in gaps if g < 0)),
                 "handoff.done": float(len(runs_))},
                {"feature": system.serial_feature, "max_ms": max(gaps), "jobs_run": len(runs_)})

    return await _repeat(ctx, systems, runs, "handoff", one)


# -- 6. idle cost --------------------------------------------------------------------------------------

async def _xacts(server: Server, dbname: str) -> int:
    # Read from the admin database, so these reads never count toward the bench database.
    conn = await asyncpg.connect(server.admin_dsn)
    try:
        return await conn.fetchval(
            "SELECT xact_commit + xact_rollback FROM pg_stat_database WHERE datname = $1", dbname)
    finally:
        await conn.close()


async def _wal_lsn(server: Server) -> int:
    conn = await asyncpg.connect(server.admin_dsn)
    try:
        return int(await conn.fetchval("SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')"))
    finally:
        await conn.close()


async def _idle_window(ctx: Context, dsn: str) -> float:
    dbname = database_of(dsn)
    t1, x1 = time.monotonic(), await _xacts(ctx.server, dbname)
    await asyncio.sleep(ctx.scale.idle_seconds)
    t2, x2 = time.monotonic(), await _xacts(ctx.server, dbname)
    return (x2 - x1) / (t2 - t1)


async def idle(ctx: Context, systems: list[System], runs: int) -> MeasureResult:
    """One worker (concurrency C) on an empty queue, after a warm-up job and a settle period.
    Counted: transactions (commits + rollbacks) of the bench database in pg_stat_database over the
    window, per second; every statement outside an explicit transaction is one. The harness reads
    the counters from another database, and a baseline window with no worker at all is subtracted."""
    sc = ctx.scale
    async with fresh_database(ctx.server, "idle_base") as dsn:
        await asyncio.sleep(sc.idle_settle)
        baseline = await _idle_window(ctx, dsn)
    print(f"  idle: baseline without a worker {baseline:.3f} tx/s", flush=True)

    async def one(system: System, run: int) -> tuple[Metrics, dict[str, Any]]:
        async with fresh_database(ctx.server, "idle") as dsn:
            await _install(ctx, system, dsn)
            marks_dir = ctx.marks_dir(system, "idle")
            workers = await _start_workers(ctx, system, dsn, 1, marks_dir, "idle")
            try:
                await _warm_up(ctx, system, dsn, marks_dir, workers, "idle")
                await asyncio.sleep(sc.idle_settle)
                raw = await _idle_window(ctx, dsn)
                _check_alive(workers, ctx.log(system, "idle-worker"))
            finally:
                await _stop_workers(workers)
        return {"idle.tps": max(0.0, raw - baseline)}, {"raw_tps": raw, "baseline_tps": baseline}

    result = await _repeat(ctx, systems, runs, "idle", one)
    result.info["baseline_tps"] = baseline
    return result


# -- 7. HTTP trigger ---------------------------------------------------------------------------------

def api_available() -> tuple[bool, str]:
    proc = subprocess.run([DATALOADER.python, "-c", "import dataloader.api.server"], capture_output=True,
                          text=True, cwd=ROOT, env=DATALOADER.env())
    if proc.returncode == 0:
        return True, ""
    last = (proc.stderr.strip().splitlines() or ["?"])[-1]
    return False, last


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


WRK_SCRIPT = Path(__file__).with_name("http_trigger.lua")
WRK_BATCH_SCRIPT = Path(__file__).with_name("http_batch.lua")
# Jobs per request of the batch run (POST /api/v1/jobs/batch takes at most 1000).
HTTP_BATCH = 1000


async def http(ctx: Context, systems: list[System], runs: int) -> MeasureResult:
    """dataloader only: `python -m dataloader serve` (its workers serve another queue, so nothing
    is consumed meanwhile), loaded by C concurrent clients that POST /api/v1/jobs/trigger with
    distinct lock_keys. The client is `wrk` (C connections, 2 threads, its own process, so the
    load generator does not compete with the server for a Python interpreter) for a fixed
    duration: requests/s as wrk counts them, and the jobs in the database must equal the 2xx
    responses. Without wrk on PATH (`apt-get install wrk`): C httpx.AsyncClient loops in the
    harness until R requests are done, timed first request -> last response (a lower bound: the
    client shares the CPUs and an interpreter's worth of overhead). A non-2xx response fails the run."""
    import httpx

    sc = ctx.scale
    ok, why = api_available()
    if not ok:
        result = MeasureResult()
        result.info["n/a"] = f"API not built ({why})"
        print(f"  http: n/a (API not built: {why})", flush=True)
        return result
    if DATALOADER not in systems:
        return MeasureResult()
    wrk = shutil.which("wrk")

    async def with_wrk(host: str, port: int, script: Path = WRK_SCRIPT) -> tuple[int, float]:
        duration = max(3, int(sc.http_requests / 1000))
        done = await asyncio.create_subprocess_exec(
            wrk, "-t2", f"-c{sc.http_clients}", f"-d{duration}s", "--latency", "-s", str(script),
            f"http://{host}:{port}", stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
            env={**os.environ, "BENCH_HTTP_BATCH": str(HTTP_BATCH)})
        out = (await asyncio.wait_for(done.communicate(), duration + 60))[0].decode()
        ctx.log(DATALOADER, f"http-wrk-{script.stem}").write_text(out)
        bad = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
        errors = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", out)
        if done.returncode or bad or (errors and any(int(n) for n in errors.groups())):
            raise RuntimeError(f"wrk: {' | '.join(out.strip().splitlines()[-6:])}")
        requests = int(re.search(r"(\d+) requests in ([\d.]+)(m?s)", out).group(1))
        rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))
        return requests, rps

    async def with_httpx(client: httpx.AsyncClient, url: str) -> tuple[int, float]:
        counter = iter(range(sc.http_requests))
        errors: list[str] = []

        async def client_loop() -> None:
            for i in counter:
                r = await client.post(url, json={"queue": "bench", "task": "dl.noop",
                                                 "lock_key": f"k{i}", "args": {"i": i}})
                if not r.is_success:
                    errors.append(f"{r.status_code}: {r.text[:200]}")

        started = time.perf_counter()
        await asyncio.gather(*(client_loop() for _ in range(sc.http_clients)))
        elapsed = time.perf_counter() - started
        if errors:
            raise RuntimeError(f"{len(errors)} failed requests, e.g. {errors[0]}")
        return sc.http_requests, sc.http_requests / elapsed

    async def one(system: System, run: int) -> tuple[Metrics, dict[str, Any]]:
        async with fresh_database(ctx.server, "http") as dsn:
            await _install(ctx, system, dsn)
            port = _free_port()
            env = system.worker_env(dsn, 1, ctx.workdir)
            env["WORKERS_JSON"] = json.dumps([{"queue": "bench-other", "concurrency": 1}])
            server = await procs.spawn([system.python, "-m", "dataloader", "serve", "--port", str(port)],
                                       env, ctx.log(system, "http-server"))
            url = f"http://127.0.0.1:{port}/api/v1/jobs/trigger"
            try:
                async with httpx.AsyncClient(timeout=30) as client:
                    deadline = procs.Deadline(60)
                    while True:  # up when a trigger succeeds
                        _check_alive([server], ctx.log(system, "http-server"))
                        with contextlib.suppress(httpx.TransportError):
                            r = await client.post(url, json={"queue": "bench", "task": "dl.noop",
                                                             "lock_key": "warm-up", "args": {}})
                            if r.is_success:
                                break
                            raise RuntimeError(f"warm-up trigger answered {r.status_code}: {r.text[:200]}")
                        if deadline.passed:
                            raise TimeoutError("the API did not come up within 60 s")
                        await asyncio.sleep(0.2)
                    await _checkpoint(dsn)
                    if wrk:
                        requests, rps = await with_wrk("127.0.0.1", port)
                    else:
                        requests, rps = await with_httpx(client, url)
                    jobs = await _count_bench_jobs(dsn) - 1
                    # wrk counts the requests answered before its time was up; the C still in flight
                    # then were answered too (2xx or not, uncounted), so each answered one is a job,
                    # and at most C more.
                    if not requests <= jobs <= requests + sc.http_clients:
                        raise RuntimeError(f"{requests} requests answered 2xx but {jobs} jobs in the database")
                    metrics: Metrics = {"http.rps": rps}
                    info: dict[str, Any] = {"requests": requests, "client": "wrk" if wrk else "httpx in the harness",
                                            "clients": sc.http_clients}
                    if wrk:  # the batch endpoint, same server, after a checkpoint
                        await _checkpoint(dsn)
                        batches, batch_rps = await with_wrk("127.0.0.1", port, WRK_BATCH_SCRIPT)
                        batch_jobs = await _count_bench_jobs(dsn) - 1 - jobs
                        if not batches * HTTP_BATCH <= batch_jobs <= (batches + sc.http_clients) * HTTP_BATCH:
                            raise RuntimeError(f"{batches} batches answered 2xx but {batch_jobs} jobs in the database")
                        metrics["http.batch_jobs"] = batch_rps * HTTP_BATCH
                        info["batches"] = batches
            finally:
                await procs.stop(server)
        return metrics, info

    return await _repeat(ctx, [DATALOADER], runs, "http", one)


async def _count_bench_jobs(dsn: str) -> int:
    conn = await asyncpg.connect(dsn)
    try:
        return await conn.fetchval("SELECT count(*) FROM dl_jobs WHERE queue = 'bench'")
    finally:
        await conn.close()


# -- 9. retention: prune beside a drain ------------------------------------------------------------------

def _finished_sql(total: int) -> str:
    """`total` jobs that finished 40 days ago (the four finished statuses in turn), each with one
    journal row, as a months-old table looks to the pruner."""
    return f"""
        WITH jobs AS (
            INSERT INTO dl_jobs (job_id, queue, task, lock_key, status, attempt, created_at, available_at,
                                 started_at, finished_at, producer)
            SELECT gen_random_uuid(), 'bench', 'dl.noop', 'old' || i,
                   (ARRAY['succeeded','canceled','failed','lost'])[1 + i % 4]::dl_status, 1,
                   now() - interval '41 days', now() - interval '41 days', now() - interval '41 days',
                   now() - interval '40 days' + i * interval '1 millisecond', 'bench'
            FROM generate_series(1, {total}) AS i
            RETURNING job_id
        )
        INSERT INTO dl_job_events (job_id, queue, kind) SELECT job_id, 'bench', 'picked' FROM jobs"""


async def prune(ctx: Context, systems: list[System], runs: int) -> MeasureResult:
    """dataloader only. A table holding `prune_rows` jobs finished 40 days ago (one journal row
    each) and `prune_drain` queued no-op jobs; one worker process (concurrency C, its own pruner
    and stats rollup off) drains the queue, once alone and once while the harness runs the
    engine's prune statement (storage/queries/retention/prune_batch.sql, `prune_batch` rows per
    statement, each its own transaction, as the leader's pruner does) in a loop until the old
    rows are gone. Reported: the drain's rate (active, as in processing) without and with the
    pruner, their ratio, and the prune rate (jobs deleted per second, journal rows included)."""
    sc = ctx.scale
    result = MeasureResult()
    if DATALOADER not in systems:
        return result
    prune_sql = (dataloader_src() / "dataloader" / "storage" / "queries" / "retention" / "prune_batch.sql")
    if not prune_sql.exists():
        result.errors[DATALOADER.name] = ["n/a: this revision has no pruner"]
        return result
    statement = prune_sql.read_text()

    async def drain(system: System, dsn: str, what: str, conn: asyncpg.Connection) -> float:
        await _driver(ctx, system, "prefill", dsn, "--n", str(sc.prune_drain), "--batch", str(sc.batch_size))
        await conn.execute("VACUUM ANALYZE dl_jobs")
        env = {**system.worker_env(dsn, sc.concurrency, ctx.marks_dir(system, what)),
               "DL_RETENTION_ENABLED": "false", "DL_STATS_ENABLED": "false"}
        worker = await procs.spawn(system.worker_argv(dsn, sc.concurrency, False), env, ctx.log(system, what))
        deadline = procs.Deadline(sc.timeout)
        try:
            while await conn.fetchval("SELECT 1 FROM dl_jobs WHERE status IN ('queued', 'running') LIMIT 1"):
                _check_alive([worker], ctx.log(system, what))
                if deadline.passed:
                    raise TimeoutError(f"{what}: not drained after {sc.timeout:.0f} s")
                await asyncio.sleep(0.05)
        finally:
            await procs.stop(worker)
        span = await conn.fetchrow(
            "SELECT min(started_at) AS a, max(finished_at) AS b, count(*) AS n FROM dl_jobs "
            "WHERE status = 'succeeded' AND finished_at > now() - interval '1 day'")
        await conn.execute("DELETE FROM dl_jobs WHERE finished_at > now() - interval '1 day'")
        if span["n"] != sc.prune_drain:
            raise RuntimeError(f"{what}: {span['n']} of {sc.prune_drain} jobs succeeded")
        return sc.prune_drain / (span["b"] - span["a"]).total_seconds()

    async def one(system: System, run: int) -> tuple[Metrics, dict[str, Any]]:
        async with fresh_database(ctx.server, "prune") as dsn:
            await _install(ctx, system, dsn)
            conn = await asyncpg.connect(dsn)
            pruner = await asyncpg.connect(dsn)
            try:
                await conn.execute(_finished_sql(sc.prune_rows), timeout=sc.timeout)
                alone = await drain(system, dsn, "prune-alone", conn)
                stop = asyncio.Event()
                batch_ms: list[float] = []

                async def prune_loop() -> tuple[int, float]:
                    deleted, started = 0, time.perf_counter()
                    while not stop.is_set():
                        for status in ("succeeded", "canceled", "failed", "lost"):
                            t = time.perf_counter()
                            n = await pruner.fetchval(statement, "bench", status, 7 * 86400.0, sc.prune_batch)
                            batch_ms.append((time.perf_counter() - t) * 1000)
                            deleted += n
                        if deleted >= sc.prune_rows:
                            break
                    return deleted, time.perf_counter() - started

                task = asyncio.create_task(prune_loop())
                beside = await drain(system, dsn, "prune-beside", conn)
                stop.set()
                deleted, seconds = await task
                if deleted < sc.prune_rows:  # the drain ended first: finish the prune, still timed
                    stop.clear()
                    more, extra = await prune_loop()
                    deleted, seconds = deleted + more, seconds + extra
                left = await conn.fetchval("SELECT count(*) FROM dl_jobs")
                orphans = await conn.fetchval("SELECT count(*) FROM dl_job_events")
            finally:
                await pruner.close()
                await conn.close()
        if left or orphans:
            raise RuntimeError(f"{left} jobs and {orphans} journal rows left after the prune")
        return ({"prune.drain_alone": alone, "prune.drain_beside": beside, "prune.drain_ratio": beside / alone,
                 "prune.rows_per_sec": deleted / seconds,
                 "prune.batch_p50_ms": percentile(batch_ms, 50), "prune.batch_p99_ms": percentile(batch_ms, 99)},
                {"rows": deleted, "prune_seconds": seconds, "batch": sc.prune_batch})

    return await _repeat(ctx, [DATALOADER], runs, "prune", one)


MEASURES: dict[str, Callable[[Context, list[System], int], Awaitable[MeasureResult]]] = {
    "enqueue": enqueue,
    "processing": processing,  # also measure 8, memory
    "latency": latency,
    "claim": claim,
    "handoff": handoff,
    "idle": idle,
    "http": http,
    "prune": prune,
}


def cleanup_workdir(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)
