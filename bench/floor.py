"""The floor of enqueue (issue 38): what the server itself needs to store N jobs in one statement,
beside what our enqueue and PgQueuer's batch insert take for the same N, interleaved on one server.

    python -m bench.floor [--dsn postgresql://postgres@127.0.0.1:5432/postgres] [--sizes 1000,10000]
                          [--rounds 5] [--only SUBSTRING]

Without --dsn (or BENCH_DSN) it starts an embedded PostgreSQL 18 (bench/pg.py). One fresh, migrated
database (BENCH_DB_PREFIX starts its name); each variant gets a scratch schema with tables built
from the migrated `dl_jobs` / `dl_job_events` (columns with their defaults and checks, then every
index re-created from `pg_indexes`, the journal's foreign key and the statement-level NOTIFY
trigger as migrated), minus what the variant leaves out. Autovacuum is off on the scratch tables
(it would run inside other variants' timings); the public tables are as migrated.

Each measurement: TRUNCATE the variant's tables (untimed), then one transaction with the one
statement (or, for COPY, the one or two COPYs) and its COMMIT, timed: wall, this process's CPU,
and the CPU of the database's client backends (from /proc: the server must be on this machine).
Every round runs every variant and size once, in an order rotated per round; the figures are the
medians over rounds, with the load average at the start and end of each round recorded.

The rows are the bench's no-op jobs (`bench/drivers/dataloader_driver.py`): task `dl.noop`, queue
`bench`, args `{}`, lock_key `str(i)`, time-ordered ids made by the client; the 12 arrays our
statement takes (`insert_jobs_batch_unkeyed.sql`), the journal row `queued` with `{"task": ...}`.
Keyed variants give every job a distinct idempotency key and use `ON CONFLICT (idempotency_key)
DO NOTHING`, as `insert_jobs_batch.sql` does.

Variants marked `ours:` run dataloader's own statements on the public tables, with the arrays the
App builds (`JobManager.batch_columns`), or the whole `App.enqueue_many`; `pgqueuer` is
`Queries.enqueue` with lists, in its own process and venv (bench/peers/pgqueuer_floor.py).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import asyncpg

from bench import peers_venv
from bench.pg import start_server
from bench.step_statement import migrated_database

ROOT = Path(__file__).resolve().parent.parent
QUEUE, TASK = "bench", "dl.noop"
VALUES_PARAMETER_LIMIT = 32_767  # asyncpg's bind-parameter limit: multi-row VALUES stops below it

# The index entries a queued, unkeyed job writes (the partial indexes whose predicate a new job
# does not meet get none); the primary key stays in every variant (the journal's FK needs it).
JOB_INDEXES_WITH_ENTRIES = ("dl_jobs_idempotency_key_key", "ix_dl_jobs_claim", "ix_dl_jobs_claim_order",
                            "ix_dl_jobs_created", "ix_dl_jobs_fair", "ix_dl_jobs_key_live",
                            "ix_dl_jobs_status_queue")
JOURNAL_INDEXES = ("dl_job_events_pkey", "ix_dl_job_events_job")

_JOB_COLUMNS = ("job_id, queue, task, args, idempotency_key, lock_key, partition_key, priority, available_at, "
                "max_attempts, lease_ttl_sec, producer, timeout_sec")
_UNNEST = ("unnest($1::uuid[], $2::text[], $3::text[], $4::text[]::jsonb[], $5::text[], $6::text[], $7::text[], "
           "$8::int[], $9::timestamptz[], $10::int[], $11::int[], $12::int[]) AS t(job_id, queue, task, args, "
           "idempotency_key, lock_key, partition_key, priority, available_at, max_attempts, lease_ttl_sec, "
           "timeout_sec)")
_UNNEST_SELECT = ("SELECT t.job_id, t.queue, t.task, t.args, t.idempotency_key, t.lock_key, t.partition_key, "
                  "t.priority, COALESCE(t.available_at, now()), t.max_attempts, t.lease_ttl_sec, NULL, t.timeout_sec "
                  f"FROM {_UNNEST}")
# The columns that differ per job only; the rest from the column defaults.
_UNNEST_NARROW = ("SELECT t.job_id, t.queue, t.task, t.args, t.idempotency_key, t.lock_key FROM "
                  "unnest($1::uuid[], $2::text[], $3::text[], $4::text[]::jsonb[], $5::text[], $6::text[]) "
                  "AS t(job_id, queue, task, args, idempotency_key, lock_key)")
_VALUE_TYPES = ("uuid", "text", "text", "jsonb", "text", "text", "text", "int", "timestamptz", "int", "int", "int")
_CONFLICT = " ON CONFLICT (idempotency_key) DO NOTHING"
_JOURNAL = ("INSERT INTO {s}.events (job_id, queue, kind, payload) "
            "SELECT job_id, queue, 'queued', jsonb_build_object('task', task) FROM inserted")


@dataclass(frozen=True)
class Variant:
    name: str
    shape: str  # unnest | unnest-narrow | values | copy | ours-sql | ours-app | pgqueuer
    journal: bool = True
    keyed: bool = False
    leave_out: frozenset[str] = frozenset()  # index names, "fk", "trigger", "all-indexes"
    schema: str = ""


def variants() -> list[Variant]:
    every = frozenset({"all-indexes"})
    out = [
        Variant("heap only: no index, no journal, no trigger", "unnest", journal=False,
                leave_out=every | {"trigger"}),
        Variant("dl_jobs with its indexes, no journal", "unnest", journal=False),
        Variant("promise floor: + journal row in the statement (FK), unkeyed", "unnest"),
        Variant("promise floor, keyed (ON CONFLICT)", "unnest", keyed=True),
        Variant("promise floor, 6 arrays (rest from defaults)", "unnest-narrow"),
        *[Variant(f"promise floor without {name}", "unnest", leave_out=frozenset({name}))
          for name in (*JOB_INDEXES_WITH_ENTRIES, *JOURNAL_INDEXES, "fk", "trigger")],
        Variant("VALUES: dl_jobs with its indexes, no journal", "values", journal=False),
        Variant("VALUES: promise floor, unkeyed", "values"),
        Variant("COPY: dl_jobs with its indexes, no journal", "copy", journal=False),
        Variant("COPY: promise floor (two COPYs, one transaction)", "copy"),
        Variant("ours: insert_job_columns, unkeyed (App's arrays)", "ours-sql"),
        Variant("ours: insert_job_columns, keyed (App's arrays)", "ours-sql", keyed=True),
        Variant("ours: App.enqueue_many, unkeyed", "ours-app"),
        Variant("ours: App.enqueue_many, keyed", "ours-app", keyed=True),
        Variant("pgqueuer: Queries.enqueue", "pgqueuer"),
    ]
    return [Variant(v.name, v.shape, v.journal, v.keyed, v.leave_out, f"floor_{i}") for i, v in enumerate(out)]


def _cpu_sec(pid: int) -> float:
    """A process's time on CPU in ns from /proc/<pid>/schedstat (/proc/<pid>/stat counts 10 ms ticks,
    too coarse for a 30 ms statement)."""
    try:
        return int(open(f"/proc/{pid}/schedstat").read().split()[0]) / 1e9
    except FileNotFoundError:
        return 0.0


class Backends:
    """CPU of the database's client backends other than the controlling session's."""

    def __init__(self, control: asyncpg.Connection) -> None:
        self.control = control

    async def read(self) -> dict[int, float]:
        pids = await self.control.fetch(
            "SELECT pid FROM pg_stat_activity WHERE datname = current_database() "
            "AND backend_type = 'client backend' AND pid <> pg_backend_pid()")
        return {row["pid"]: _cpu_sec(row["pid"]) for row in pids}

    @staticmethod
    def spent(before: dict[int, float], after: dict[int, float]) -> float:
        return sum(value - before.get(pid, 0.0) for pid, value in after.items())


async def _build_schema(conn: asyncpg.Connection, v: Variant) -> None:
    s = v.schema
    await conn.execute(f"DROP SCHEMA IF EXISTS {s} CASCADE; CREATE SCHEMA {s}")
    await conn.execute(f"CREATE TABLE {s}.jobs (LIKE public.dl_jobs INCLUDING DEFAULTS INCLUDING CONSTRAINTS) "
                       "WITH (autovacuum_enabled = off)")
    await conn.execute(f"CREATE TABLE {s}.events (LIKE public.dl_job_events INCLUDING DEFAULTS "
                       "INCLUDING CONSTRAINTS) WITH (autovacuum_enabled = off)")
    for table, target in (("dl_jobs", "jobs"), ("dl_job_events", "events")):
        for row in await conn.fetch("SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = 'public' "
                                    "AND tablename = $1", table):
            name = row["indexname"]
            is_pkey = name in ("dl_jobs_pkey",)
            if not is_pkey and ("all-indexes" in v.leave_out or name in v.leave_out):
                continue
            # the journal is partitioned (0039): its indexes are defined `ON ONLY` the parent
            ddl = row["indexdef"]
            for parent in (f"public.{table}", f"ONLY public.{table}"):
                ddl = ddl.replace(f" INDEX {name} ON {parent} ", f" INDEX {name} ON {s}.{target} ")
            await conn.execute(ddl)
            if is_pkey:
                await conn.execute(f"ALTER TABLE {s}.jobs ADD CONSTRAINT {name} PRIMARY KEY USING INDEX {name}")
    if "fk" not in v.leave_out:
        await conn.execute(f"ALTER TABLE {s}.events ADD FOREIGN KEY (job_id) REFERENCES {s}.jobs(job_id) "
                           "ON DELETE CASCADE")
    if "trigger" not in v.leave_out:
        await conn.execute(f"CREATE TRIGGER notify_ins AFTER INSERT ON {s}.jobs REFERENCING NEW TABLE AS "
                           "inserted_rows FOR EACH STATEMENT EXECUTE FUNCTION public.notify_jobs_inserted()")


def _arrays(n: int, keyed: bool) -> tuple[list[Any], ...]:
    from dataloader.model.ids import new_ids

    ids = new_ids(n)
    return (ids, [QUEUE] * n, [TASK] * n, ["{}"] * n, [f"key-{i}" for i in range(n)] if keyed else [None] * n,
            [str(i) for i in range(n)], [""] * n, [100] * n, [None] * n, [5] * n, [60] * n, [None] * n)


def _statement(v: Variant, n: int) -> str:
    s = v.schema
    conflict = _CONFLICT if v.keyed else ""
    if v.shape == "values":
        rows = ", ".join("(" + ", ".join(f"${i * 12 + c}::{t}" for c, t in enumerate(_VALUE_TYPES, 1)) + ")"
                         for i in range(n))
        source = ("SELECT v.job_id::uuid, v.queue, v.task, v.args, v.idempotency_key, v.lock_key, v.partition_key, "
                  "v.priority::int, COALESCE(v.available_at::timestamptz, now()), v.max_attempts::int, "
                  "v.lease_ttl_sec::int, NULL, v.timeout_sec::int FROM (VALUES " + rows + ") AS v(job_id, queue, "
                  "task, args, idempotency_key, lock_key, partition_key, priority, available_at, max_attempts, "
                  "lease_ttl_sec, timeout_sec)")
        columns = _JOB_COLUMNS
    elif v.shape == "unnest-narrow":
        source, columns = _UNNEST_NARROW, "job_id, queue, task, args, idempotency_key, lock_key"
    else:
        source, columns = _UNNEST_SELECT, _JOB_COLUMNS
    insert = f"INSERT INTO {s}.jobs ({columns}) {source}{conflict}"
    if not v.journal:
        return insert
    return f"WITH inserted AS ({insert} RETURNING job_id, queue, task) {_JOURNAL.format(s=s)}"


@dataclass
class Runner:
    control: asyncpg.Connection
    work: asyncpg.Connection
    dsn: str
    app: Any = None
    pgqueuer: subprocess.Popen[str] | None = None
    backends: Backends = field(init=False)

    def __post_init__(self) -> None:
        self.backends = Backends(self.control)

    async def truncate(self, v: Variant) -> None:
        if v.shape in ("ours-sql", "ours-app"):
            await self.control.execute("TRUNCATE dl_jobs, dl_job_events CASCADE")
        elif v.shape != "pgqueuer":
            await self.control.execute(f"TRUNCATE {v.schema}.jobs, {v.schema}.events")

    async def one(self, v: Variant, n: int) -> dict[str, float]:
        await self.truncate(v)
        if v.shape == "pgqueuer":
            assert self.pgqueuer is not None and self.pgqueuer.stdin and self.pgqueuer.stdout
            before = await self.backends.read()
            cpu0 = time.process_time()
            self.pgqueuer.stdin.write(f"{n}\n")
            self.pgqueuer.stdin.flush()
            figures = json.loads(await asyncio.to_thread(self.pgqueuer.stdout.readline))
            after = await self.backends.read()
            return {"wall": figures["wall"], "client_cpu": figures["client_cpu"] + time.process_time() - cpu0,
                    "db_cpu": Backends.spent(before, after)}
        arrays = _arrays(n, v.keyed)
        if v.shape == "ours-app":
            items = [{"task": TASK, "args": {}, "queue": QUEUE, "lock_key": str(i)} for i in range(n)]
            if v.keyed:
                for i, item in enumerate(items):
                    item["idempotency_key"] = f"key-{i}"
        elif v.shape == "ours-sql":
            manager = self.app.jobs
            columns = manager.batch_columns(
                [{"task": TASK, "args": {}, "queue": QUEUE, "lock_key": str(i),
                  **({"idempotency_key": f"key-{i}"} if v.keyed else {})} for i in range(n)])
            # JobRepository.insert_job_columns on this session: it picks the statement (keyed or
            # not) and builds its parameters, as App.enqueue_many does after batch_columns
            from dataloader.storage.executor import InTransaction

            repo, executor = self.app.repo, InTransaction(self.work)
        else:
            statement = _statement(v, n)
            params = arrays if v.shape != "unnest-narrow" else arrays[:6]
            if v.shape == "values":
                params = tuple(value for row in zip(*arrays, strict=True) for value in row)
        before = await self.backends.read()
        cpu0, t0 = time.process_time(), time.perf_counter()
        if v.shape == "ours-app":
            inserted = await self.app.enqueue_many(items)
            assert len(inserted) == n, len(inserted)
        elif v.shape == "ours-sql":
            async with self.work.transaction():
                inserted = await repo.insert_job_columns(columns.columns, executor, None, columns.timeouts)
            assert len(inserted) == n, len(inserted)
        elif v.shape == "copy":
            now = datetime.now(UTC)
            async with self.work.transaction():
                await self.work.copy_records_to_table(
                    "jobs", schema_name=v.schema, columns=[c.strip() for c in _JOB_COLUMNS.split(",")],
                    records=[(arrays[0][i], QUEUE, TASK, "{}", None, arrays[5][i], "", 100, now, 5, 60, None, None)
                             for i in range(n)])
                if v.journal:
                    await self.work.copy_records_to_table(
                        "events", schema_name=v.schema, columns=["job_id", "queue", "kind", "payload"],
                        records=[(job_id, QUEUE, "queued", '{"task": "dl.noop"}') for job_id in arrays[0]])
        else:
            async with self.work.transaction():
                await self.work.execute(statement, *params)
        wall = time.perf_counter() - t0
        client = time.process_time() - cpu0
        after = await self.backends.read()
        return {"wall": wall, "client_cpu": client, "db_cpu": Backends.spent(before, after)}


def _applies(v: Variant, n: int) -> bool:
    return not (v.shape == "values" and n * 12 > VALUES_PARAMETER_LIMIT)


async def _run(admin_dsn: str, sizes: list[int], rounds: int, only: str | None) -> dict[str, Any]:
    import dataloader

    chosen = [v for v in variants() if only is None or only in v.name]
    async with migrated_database(admin_dsn, "floor") as dsn:
        control = await asyncpg.connect(dsn)
        work = await asyncpg.connect(dsn)
        info = {"server_version": await control.fetchval("SHOW server_version"),
                "fsync": await control.fetchval("SHOW fsync"),
                "synchronous_commit": await control.fetchval("SHOW synchronous_commit")}
        for v in chosen:
            if v.shape not in ("ours-sql", "ours-app", "pgqueuer"):
                await _build_schema(control, v)
        runner = Runner(control, work, dsn)
        runner.app = await dataloader.App(dataloader.Settings(db_dsn=dsn, workers=[], db_pool_extra=2)).open()
        if any(v.shape == "pgqueuer" for v in chosen):
            runner.pgqueuer = await start_pgqueuer(dsn, "enqueue")
        try:
            for v in chosen:  # a warm-up of every statement (plans, caches), not recorded
                await runner.one(v, 100)
            samples: dict[str, dict[int, list[dict[str, float]]]] = {v.name: {n: [] for n in sizes} for v in chosen}
            loads = []
            for round_ in range(rounds):
                load_start = os.getloadavg()
                k = round_ * 7 % len(chosen)
                for v in chosen[k:] + chosen[:k]:
                    for n in sizes if round_ % 2 == 0 else sizes[::-1]:
                        if _applies(v, n):
                            samples[v.name][n].append(await runner.one(v, n))
                loads.append({"round": round_, "start": load_start, "end": os.getloadavg()})
                print(f"round {round_} done, load {load_start[0]:.1f} -> {os.getloadavg()[0]:.1f}", flush=True)
        finally:
            await runner.app.close()
            if runner.pgqueuer is not None:
                runner.pgqueuer.stdin.close()  # type: ignore[union-attr]
                runner.pgqueuer.wait(timeout=30)
            await work.close()
            await control.close()
    table = []
    for v in chosen:
        for n in sizes:
            runs = samples[v.name][n]
            if not runs:
                continue
            wall = statistics.median(r["wall"] for r in runs)
            table.append({"variant": v.name, "n": n, "rounds": len(runs), "rows_per_s": n / wall,
                          "wall_us_per_row": wall / n * 1e6,
                          "client_cpu_us_per_row": statistics.median(r["client_cpu"] for r in runs) / n * 1e6,
                          "db_cpu_us_per_row": statistics.median(r["db_cpu"] for r in runs) / n * 1e6,
                          "runs": runs})
    return {"info": info, "loads": loads, "table": table}


def _print(result: dict[str, Any]) -> None:
    print(f"\nPostgreSQL {result['info']['server_version']}, loads "
          + ", ".join(f"{x['start'][0]:.1f}-{x['end'][0]:.1f}" for x in result["loads"]))
    print("| variant | N | rows/s | wall µs/row | client CPU µs/row | server CPU µs/row |\n|---|---|---|---|---|---|")
    for row in result["table"]:
        print(f"| {row['variant']} | {row['n']:,} | {row['rows_per_s']:,.0f} | {row['wall_us_per_row']:.1f} | "
              f"{row['client_cpu_us_per_row']:.1f} | {row['db_cpu_us_per_row']:.1f} |")


async def start_pgqueuer(dsn: str, mode: str) -> subprocess.Popen[str]:
    """peers/pgqueuer_floor.py in `mode` (enqueue or drain) on `dsn`, in the peers venv, once it is ready."""
    peers_venv.ensure()
    peer = subprocess.Popen(  # noqa: ASYNC220 (a pipe read line by line in a thread)
        [str(peers_venv.PYTHON), str(ROOT / "bench" / "peers" / "pgqueuer_floor.py"), dsn, mode],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert peer.stdout is not None
    json.loads(await asyncio.to_thread(peer.stdout.readline))
    return peer


async def run_and_record(dsn: str | None, run: Callable[[str], Awaitable[dict[str, Any]]], *,
                         printer: Callable[[dict[str, Any]], None], name: str) -> None:
    """Start the server (`dsn`, else BENCH_DSN, else embedded), `run` on it, stamp the result with
    the commit, server and machine, print it and write bench/results/<name>-<UTC>.json."""
    if dsn:
        os.environ["BENCH_DSN"] = dsn
    server = start_server()
    try:
        result = await run(server.admin_dsn)
    finally:
        server.stop()
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,  # noqa: ASYNC221
                            text=True).stdout.strip()
    result["info"].update({"dataloader": commit, "server": server.kind, "machine": platform.node(),
                           "argv": sys.argv[1:]})
    printer(result)
    out = ROOT / "bench" / "results" / f"{name}-{datetime.now(UTC):%Y%m%dT%H%M%SZ}.json"
    out.write_text(json.dumps(result, indent=1, default=str))
    print(f"\nwrote {out.relative_to(ROOT)}")


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dsn", default=None, help="a server on this machine (default: BENCH_DSN, else embedded)")
    parser.add_argument("--sizes", default="1000,10000")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--only", default=None, help="only the variants whose name contains this")
    args = parser.parse_args()
    sizes = [int(x) for x in args.sizes.split(",")]
    await run_and_record(args.dsn, lambda dsn: _run(dsn, sizes, args.rounds, args.only), printer=_print, name="floor")


if __name__ == "__main__":
    asyncio.run(main())
