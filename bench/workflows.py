"""`python -m bench workflows [--quick] [--runs N] [--systems dataloader,dbos,absurd]`: dataloader's
durable workflows against DBOS Transact (PyPI `dbos`) and Absurd (PyPI `absurd-sdk`), on the same
PostgreSQL, a fresh database per measurement, the systems in the same run (their order reversed
every other run), median over runs and the ratio dataloader / each peer.

Measures (bench/README.md, "Workflows against DBOS Transact and Absurd", says exactly what each
side does):
1. `three`: N 3-step workflows (no-op steps) started one call at a time, then one worker process
   drains them: workflows/s from the system's own first start → last finish.
2. `steps` vs `plain`: M workflows of K no-op steps drained, time per step; M·K plain no-ops
   (dataloader: a `dl.noop` job; DBOS: a queued workflow without steps; Absurd: a task without
   steps) drained, time per job.
3. `fanout`: one parent starts C child workflows (1 step each) and joins all their results; time
   from the parent's start to its end (database clock) and to the client's result (wall).
4. `recovery`: W workflows of S slow steps (a 20 ms sleep each, every execution logged to a side
   file); the worker is SIGKILLed once a quarter have finished, a new one starts at once; time from
   the kill until all have finished, and how many steps recorded before the kill ran again (must
   be 0).
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import os
import shutil
import signal
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import asyncpg

from bench import peers_venv, pg, procs
from bench.systems import BENCH, DATALOADER, ROOT, set_dataloader_src

RESULTS = BENCH / "results"
POLL_SEC = 0.05


@dataclass(frozen=True)
class Scale:
    three: int = 2000          # measure 1: workflows
    step_runs: int = 50        # measure 2: workflows of `steps` steps
    steps: int = 40
    fanout: int = 1000         # measure 3: children
    recovery: int = 160        # measure 4: workflows of `recovery_steps` slow steps
    recovery_steps: int = 10
    lease_ttl_sec: int = 10    # dataloader's lease of the recovery runs (default 60)
    concurrency: int = 16
    peer_poll_sec: float = 0.05    # DBOS's queue polling, Absurd's worker poll_interval
    timeout: float = 240.0


QUICK = Scale(three=500, step_runs=20, steps=20, fanout=1000, recovery=64, timeout=120.0)


@dataclass(frozen=True)
class Side:
    name: str
    python: str
    driver: Path
    pending_sql: str     # unfinished runs/jobs
    span_sql: str        # first start, last finish (epoch s), succeeded
    recorded_sql: str    # (run id, step index) of every slow step recorded done
    run_span_sql: str    # $1 = run id: start → end of that run, seconds (database clock)
    # where the recovery run's lease is set: "enqueue" (`--lease-ttl` on each start), "worker"
    # (`--claim-timeout` on the worker) or None (the system recovers at launch, no lease)
    lease_at: str | None = None

    def env(self, marks: Path | None = None) -> dict[str, str]:
        env = DATALOADER.env() if self.name == "dataloader" else {
            k: v for k, v in os.environ.items() if not k.startswith(("DL_", "WORKERS_JSON", "PG"))}
        env["PYTHONPATH"] = env.get("PYTHONPATH") or str(ROOT)
        env["PYTHONUNBUFFERED"] = "1"
        if marks is not None:
            env["BENCH_MARKS_FILE"] = str(marks)
        return env

    def worker(self, dsn: str, scale: Scale, marks: Path | None, *extra: str) -> tuple[list[str], dict[str, str]]:
        env = self.env(marks)
        if self.name == "dataloader":
            env.update({"DL_DB_DSN": dsn, "DL_LOG_LEVEL": "WARNING",
                        "WORKERS_JSON": json.dumps([{"queue": "bench", "concurrency": scale.concurrency}]),
                        "DL_PIPELINE_MODULES": "bench.drivers.dl_workflows"})
            env.update({k.removeprefix("BENCH_WORKER_"): v for k, v in os.environ.items()
                        if k.startswith("BENCH_WORKER_DL_")})
            return [self.python, "-m", "dataloader", "worker"], env
        return [self.python, str(self.driver), "worker", "--dsn", dsn, "--concurrency", str(scale.concurrency),
                "--poll", str(scale.peer_poll_sec), *extra], env

    async def call(self, ctx: Ctx, dsn: str, action: str, *extra: str, marks: Path | None = None) -> dict[str, Any]:
        return await procs.run_json([self.python, str(self.driver), action, "--dsn", dsn, *extra],
                                    self.env(marks), ctx.scale.timeout, ctx.workdir / f"{self.name}-driver.log")


DL = Side(
    name="dataloader", python=sys.executable, driver=BENCH / "drivers" / "dl_workflow_driver.py",
    pending_sql="SELECT count(*) FROM dl_jobs WHERE status IN ('queued', 'running')",
    span_sql="""SELECT extract(epoch FROM min(started_at))::float8, extract(epoch FROM max(finished_at))::float8,
                       count(*) FILTER (WHERE status = 'succeeded') FROM dl_jobs""",
    recorded_sql="""SELECT run_id::text AS run, seq - 1 AS step FROM dl_workflow_steps
                    WHERE kind = 'step' AND state = 'done'""",
    run_span_sql="SELECT extract(epoch FROM finished_at - created_at)::float8 FROM dl_jobs WHERE job_id = $1::uuid",
    lease_at="enqueue",
)
DBOS = Side(
    name="dbos", python=str(peers_venv.DBOS_PYTHON), driver=BENCH / "peers" / "dbos_driver.py",
    pending_sql="SELECT count(*) FROM dbos.workflow_status WHERE status IN ('ENQUEUED', 'PENDING')",
    span_sql="""SELECT min(started_at_epoch_ms) / 1000.0, max(updated_at) / 1000.0,
                       count(*) FILTER (WHERE status = 'SUCCESS') FROM dbos.workflow_status""",
    recorded_sql="""SELECT workflow_uuid AS run, function_id - 1 AS step FROM dbos.operation_outputs
                    WHERE function_name = 'slow_step' AND error IS NULL""",
    run_span_sql="SELECT (updated_at - created_at) / 1000.0 FROM dbos.workflow_status WHERE workflow_uuid = $1",
)
# Absurd: a task's row (t_<queue>) and its runs (r_<queue>, one per attempt; the task points at its
# last); a step is a checkpoint row (c_<queue>) named as the driver names it (`slow:<i>`).
ABSURD = Side(
    name="absurd", python=str(peers_venv.ABSURD_PYTHON), driver=BENCH / "peers" / "absurd_driver.py",
    pending_sql="SELECT count(*) FROM absurd.t_bench WHERE state IN ('pending', 'running', 'sleeping')",
    span_sql="""SELECT extract(epoch FROM min(t.first_started_at))::float8,
                       extract(epoch FROM max(r.completed_at))::float8, count(*) FILTER (WHERE t.state = 'completed')
                FROM absurd.t_bench t LEFT JOIN absurd.r_bench r ON r.run_id = t.last_attempt_run""",
    recorded_sql="""SELECT task_id::text AS run, split_part(checkpoint_name, ':', 2)::int AS step
                    FROM absurd.c_bench WHERE checkpoint_name LIKE 'slow:%' AND status = 'committed'""",
    run_span_sql="""SELECT extract(epoch FROM r.completed_at - t.enqueue_at)::float8
                    FROM absurd.t_bench_parent t JOIN absurd.r_bench_parent r ON r.run_id = t.last_attempt_run
                    WHERE t.task_id = $1::uuid""",
    lease_at="worker",
)
SIDES = {"dataloader": DL, "dbos": DBOS, "absurd": ABSURD}
ENSURE_VENV = {"dbos": peers_venv.ensure_dbos, "absurd": peers_venv.ensure_absurd}


@dataclass
class Ctx:
    server: pg.Server
    scale: Scale
    workdir: Path


async def _fetch(dsn: str, sql: str, *args: Any) -> list[asyncpg.Record]:
    conn = await asyncpg.connect(dsn)
    try:
        return await conn.fetch(sql, *args)
    finally:
        await conn.close()


async def _wait_drained(dsn: str, side: Side, deadline: procs.Deadline, proc: Any, until: int = 0) -> float:
    """Poll every 50 ms until at most `until` runs are unfinished; the monotonic time then."""
    conn = await asyncpg.connect(dsn)
    try:
        while True:
            if await conn.fetchval(side.pending_sql) <= until:
                return time.monotonic()
            if deadline.passed:
                raise TimeoutError(f"{side.name}: not drained within {deadline.seconds:.0f} s")
            if proc is not None and proc.returncode is not None:
                raise RuntimeError(f"{side.name}: the worker exited {proc.returncode}")
            await asyncio.sleep(POLL_SEC)
    finally:
        await conn.close()


async def drain(ctx: Ctx, side: Side, kind: str, count: int, steps: int = 3) -> dict[str, Any]:
    """Fresh database; `count` runs of `kind` started (untimed for the drain); one worker drains."""
    async with pg.fresh_database(ctx.server, f"wf_{side.name}") as dsn:
        await side.call(ctx, dsn, "install")
        started = await side.call(ctx, dsn, "enqueue", "--kind", kind, "--count", str(count), "--steps", str(steps))
        argv, env = side.worker(dsn, ctx.scale, None)
        spawned = time.monotonic()
        proc = await procs.spawn(argv, env, ctx.workdir / f"{side.name}-worker.log")
        try:
            done = await _wait_drained(dsn, side, procs.Deadline(ctx.scale.timeout), proc)
        finally:
            await procs.stop(proc)
        first, last, succeeded = (await _fetch(dsn, side.span_sql))[0]
    if succeeded != count:
        raise RuntimeError(f"{side.name}: {succeeded} of {count} {kind} runs succeeded")
    span = float(last) - float(first)
    return {"count": count, "span_sec": span, "per_sec": count / span, "wall_per_sec": count / (done - spawned),
            "starts_per_sec": count / started["seconds"]}


async def measure_three(ctx: Ctx, side: Side) -> dict[str, Any]:
    d = await drain(ctx, side, "three", ctx.scale.three)
    return {"three.per_sec": d["per_sec"], "three.wall_per_sec": d["wall_per_sec"],
            "three.starts_per_sec": d["starts_per_sec"]}


async def measure_steps(ctx: Ctx, side: Side) -> dict[str, Any]:
    s = ctx.scale
    total = s.step_runs * s.steps
    wf = await drain(ctx, side, "steps", s.step_runs, s.steps)
    plain = await drain(ctx, side, "plain", total)
    per_step, per_job = wf["span_sec"] / total * 1e6, plain["span_sec"] / total * 1e6
    return {"steps.per_step_us": per_step, "steps.plain_us": per_job, "steps.step_over_plain": per_step / per_job}


async def measure_fanout(ctx: Ctx, side: Side) -> dict[str, Any]:
    async with pg.fresh_database(ctx.server, f"wf_{side.name}") as dsn:
        await side.call(ctx, dsn, "install")
        argv, env = side.worker(dsn, ctx.scale, None)
        proc = await procs.spawn(argv, env, ctx.workdir / f"{side.name}-worker.log")
        try:
            # warm-up: one 3-step workflow through the running worker, so start-up is not timed
            await side.call(ctx, dsn, "enqueue", "--kind", "three", "--count", "1")
            await _wait_drained(dsn, side, procs.Deadline(60), proc)
            out = await side.call(ctx, dsn, "fanout", "--children", str(ctx.scale.fanout))
        finally:
            await procs.stop(proc)
        db_sec = (await _fetch(dsn, side.run_span_sql, out["run_id"]))[0][0]
    expected = sum(range(ctx.scale.fanout))
    if out["result"] != expected:
        raise RuntimeError(f"{side.name}: fan-out result {out['result']!r}, expected {expected}")
    return {"fanout.db_sec": float(db_sec), "fanout.wall_sec": out["seconds"]}


def _read_marks(path: Path) -> list[tuple[str, int, int]]:
    if not path.exists():
        return []
    rows = []
    for line in path.read_text().splitlines():
        run, step, pid = line.split()
        rows.append((run, int(step), int(pid)))
    return rows


async def measure_recovery(ctx: Ctx, side: Side) -> dict[str, Any]:
    s = ctx.scale
    marks = ctx.workdir / f"{side.name}-marks-{time.monotonic_ns()}.txt"
    async with pg.fresh_database(ctx.server, f"wf_{side.name}") as dsn:
        await side.call(ctx, dsn, "install")
        lease = str(s.lease_ttl_sec)
        at_enqueue = ["--lease-ttl", lease] if side.lease_at == "enqueue" else []
        at_worker = ["--claim-timeout", lease] if side.lease_at == "worker" else []
        await side.call(ctx, dsn, "enqueue", "--kind", "slow", "--count", str(s.recovery),
                        "--steps", str(s.recovery_steps), *at_enqueue)
        argv, env = side.worker(dsn, s, marks, *at_worker)
        first = await procs.spawn(argv, env, ctx.workdir / f"{side.name}-worker.log")
        try:
            await _wait_drained(dsn, side, procs.Deadline(s.timeout), first, until=s.recovery * 3 // 4)
        finally:
            os.killpg(first.pid, signal.SIGKILL)
            killed = time.monotonic()
            await procs.stop(first)
        recorded = {(r["run"], r["step"]) for r in await _fetch(dsn, side.recorded_sql)}
        in_flight = (await _fetch(dsn, side.pending_sql))[0][0]
        second = await procs.spawn(argv, env, ctx.workdir / f"{side.name}-worker.log")
        try:
            done = await _wait_drained(dsn, side, procs.Deadline(s.timeout), second)
        finally:
            await procs.stop(second)
        succeeded = (await _fetch(dsn, side.span_sql))[0][2]
    rows = _read_marks(marks)
    return {**recovery_check(rows, recorded, first.pid), "recovery.sec": done - killed,
            "recovery.unfinished_at_kill": in_flight, "recovery.succeeded": succeeded}


def recovery_check(rows: list[tuple[str, int, int]], recorded: set[tuple[str, int]], first_pid: int
                   ) -> dict[str, int]:
    """From the side file (run, step, pid per execution) and the steps recorded before the kill:
    steps recorded before the kill that ran again (must be 0), steps that ran more than once at all
    (the ones cut off by the kill, at least once by design), and executions in all."""
    after_kill = {(run, step) for run, step, pid in rows if pid != first_pid}
    runs: dict[tuple[str, int], int] = {}
    for run, step, _ in rows:
        runs[(run, step)] = runs.get((run, step), 0) + 1
    return {"recovery.recorded_rerun": len(recorded & after_kill),
            "recovery.steps_run_twice": sum(1 for n in runs.values() if n > 1),
            "recovery.executions": len(rows)}


MEASURES = {"three": measure_three, "steps": measure_steps, "fanout": measure_fanout, "recovery": measure_recovery}

# (metric, label, unit, digits): what the table shows, in order
ROWS = [
    ("three.per_sec", "3-step workflows, 1 worker: first start→last finish", "wf/s", 0),
    ("three.wall_per_sec", "3-step workflows: worker spawn→drained (wall)", "wf/s", 0),
    ("three.starts_per_sec", "starts, one call per workflow (client)", "wf/s", 0),
    ("steps.per_step_us", "K-step workflows: time per step", "µs", 0),
    ("steps.plain_us", "plain no-op (dl: job; DBOS: queued workflow; Absurd: task): time per job", "µs", 0),
    ("steps.step_over_plain", "per step ÷ plain (same system)", "×", 2),
    ("fanout.db_sec", "fan-out/fan-in 1,000 children: parent start→end (DB clock)", "s", 2),
    ("fanout.wall_sec", "fan-out/fan-in: start call→result returned (client)", "s", 2),
    ("recovery.sec", "recovery after kill -9: kill→all finished", "s", 2),
    ("recovery.recorded_rerun", "recovery: recorded steps that ran again (must be 0)", "steps", 0),
    ("recovery.steps_run_twice", "recovery: steps run twice (cut off by the kill)", "steps", 0),
]


def _cell(values: list[float], digits: int) -> str:
    if not values:
        return "failed"
    med = statistics.median(values)
    text = f"{med:,.{digits}f}"
    if len(values) > 1:
        text += f" ({min(values):,.{digits}f}–{max(values):,.{digits}f})"
    return text


def table(results: dict[str, Any]) -> str:
    """The markdown table: per system the median (min–max) over runs, then for each peer the ratio
    dataloader / peer of each run (the runs paired by index) and their median."""
    systems = list(results["runs"])
    peers = [s for s in systems if s != "dataloader"] if "dataloader" in systems else []
    head = ["measure", "unit", *systems, *(f"ratio dl/{p}, per run (median)" for p in peers)]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for key, label, unit, digits in ROWS:
        runs = {s: [r.get(key) for r in results["runs"][s]] for s in systems}
        if not any(v is not None for vs in runs.values() for v in vs):
            continue
        cells = [_cell([v for v in runs[s] if v is not None], digits) for s in systems]
        for peer in peers:
            ratios = [a / b for a, b in zip(runs["dataloader"], runs[peer], strict=False)
                      if a is not None and b not in (None, 0)]
            cells.append((", ".join(f"{r:.2f}" for r in ratios) + f" ({statistics.median(ratios):.2f})")
                         if ratios else "—")
        lines.append(f"| {label} | {unit} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def merge(files: list[dict[str, Any]]) -> dict[str, Any]:
    """The runs of several result files of one server as one result, each system's runs in file
    order. A system a file lacks gets empty runs there, so the runs stay paired by index across
    systems (a ratio is always of the same run). Files of different servers are refused."""
    servers = {(f["postgres"]["kind"], f["postgres"]["server_version"]) for f in files}
    if len(servers) > 1:
        raise ValueError(f"results of different servers: {sorted(servers)}")
    systems = list(dict.fromkeys(s for f in files for s in f["runs"]))
    runs: dict[str, list[dict[str, Any]]] = {s: [] for s in systems}
    for f in files:
        count = max(len(r) for r in f["runs"].values())
        for system in systems:
            got = f["runs"].get(system, [])
            runs[system].extend(got + [{}] * (count - len(got)))
    return {"runs": runs}


async def _run(args: argparse.Namespace) -> int:
    from bench.cli import _machine, _snapshot_src

    scale = QUICK if args.quick else Scale()
    if args.timeout:
        scale = dataclasses.replace(scale, timeout=args.timeout)
    runs = args.runs or 2
    wanted = [m.strip() for m in args.measures.split(",") if m.strip()]
    sides = [SIDES[s.strip()] for s in args.systems.split(",") if s.strip()]
    workdir = Path(tempfile.mkdtemp(prefix="dl-bench-wf-"))
    os.chmod(workdir, 0o755)
    src, versions = _snapshot_src(args.ref, workdir)
    set_dataloader_src(src)
    for side in sides:
        if side.name in ENSURE_VENV:
            versions.update(await asyncio.to_thread(ENSURE_VENV[side.name], args.upgrade_peers))
    print("bench: starting PostgreSQL" + (" (BENCH_DSN)" if os.environ.get("BENCH_DSN") else " (embedded)"), flush=True)
    server = await asyncio.to_thread(pg.start_server)
    failed = False
    per_side: dict[str, list[dict[str, Any]]] = {s.name: [] for s in sides}
    errors: list[str] = []
    try:
        settings = await pg.read_settings(server)
        print(f"bench: PostgreSQL {settings['server_version']} ({server.kind}); versions {versions}", flush=True)
        ctx = Ctx(server=server, scale=scale, workdir=workdir)
        started = time.monotonic()
        for run in range(runs):
            order = sides if run % 2 == 0 else list(reversed(sides))  # alternate who goes first
            values: dict[str, dict[str, Any]] = {s.name: {} for s in sides}
            for name in wanted:
                for side in order:
                    t = time.monotonic()
                    try:
                        got = await asyncio.wait_for(MEASURES[name](ctx, side), 4 * scale.timeout)
                    except Exception as exc:
                        failed = True
                        errors.append(f"run {run + 1} {name} / {side.name}: {exc!r}")
                        print(f"  error: {errors[-1]}", flush=True)
                        continue
                    values[side.name].update(got)
                    # the machine is shared: the 1-minute load as each measure ends goes with it
                    values[side.name][f"{name}.load1"] = load = os.getloadavg()[0]
                    shown = ", ".join(f"{k}={v:.4g}" for k, v in got.items() if isinstance(v, int | float))
                    print(f"  run {run + 1} {name} {side.name} ({time.monotonic() - t:.0f} s, load {load:.1f}): "
                          f"{shown}", flush=True)
            for side in sides:
                values[side.name]["load_average"] = os.getloadavg()
                per_side[side.name].append(values[side.name])
        seconds = time.monotonic() - started
    finally:
        await asyncio.to_thread(server.stop)
    results = {
        "started_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "command": " ".join(["python -m bench workflows", *sys.argv[2:]]),
        "quick": args.quick, "scale": dataclasses.asdict(scale), "machine": _machine(),
        "postgres": {"kind": server.kind, **settings}, "versions": versions, "runs": per_side,
        "errors": errors, "seconds": round(seconds, 1),
    }
    out = RESULTS / f"workflows-{datetime.now(UTC):%Y%m%dT%H%M%SZ}.json"
    out.write_text(json.dumps(results, indent=2, default=str))
    print(f"\n{table(results)}\n")
    for error in errors:
        print(f"error: {error}")
    if failed or args.keep_logs:
        print(f"bench: logs kept in {workdir}")
    else:
        shutil.rmtree(workdir, ignore_errors=True)
    print(f"bench: results written to {out.relative_to(ROOT)} ({seconds:.0f} s)")
    return 1 if failed else 0


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench workflows", description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="small counts (~2 minutes)")
    parser.add_argument("--runs", type=int, default=None, help="runs per measure (default 2)")
    parser.add_argument("--measures", default=",".join(MEASURES), help=f"subset of {','.join(MEASURES)}")
    parser.add_argument("--systems", default="dataloader,dbos", help=f"subset of {','.join(SIDES)}")
    parser.add_argument("--timeout", type=float, default=None, help="seconds per drain")
    parser.add_argument("--ref", default="HEAD", help="dataloader commit to measure, or 'worktree'")
    parser.add_argument("--upgrade-peers", action="store_true", help="pip install -U the peers first")
    parser.add_argument("--keep-logs", action="store_true")
    parser.add_argument("--merge", nargs="+", type=Path, metavar="RESULTS_JSON",
                        help="run nothing: print the table over the runs of these result files (one server)")
    args = parser.parse_args(argv)
    if args.merge:
        try:
            merged = merge([json.loads(path.read_text()) for path in args.merge])
        except (OSError, ValueError, KeyError) as exc:
            parser.error(f"cannot merge: {exc}")
        print(table(merged))
        return 0
    unknown = [m for m in args.measures.split(",") if m.strip() and m.strip() not in MEASURES]
    if unknown:
        parser.error(f"unknown measure(s) {unknown}")
    unknown = [s for s in args.systems.split(",") if s.strip() and s.strip() not in SIDES]
    if unknown:
        parser.error(f"unknown system(s) {unknown}")
    try:
        return asyncio.run(_run(args))
    except KeyboardInterrupt:
        print("\nbench: interrupted", file=sys.stderr)
        return 130
