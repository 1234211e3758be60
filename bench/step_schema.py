"""What the schema costs the worker's busy step (issue #25): the one-statement step of
`bench.step_statement` drained on the migrated schema and on two variants of it, interleaved
(the order rotates per round), in one fresh database:

- `003`: the schema as migrated;
- `lean indexes`: without the index entries a no-op job's row versions write that another index
  could serve: `ix_dl_jobs_claim` (its queued rows are also in `ix_dl_jobs_claim_order`),
  `ix_dl_jobs_status_queue` replaced by a partial `(queue) WHERE status = 'running'`, and the
  idempotency constraint replaced by a partial unique index without the NULL keys;
- `no journal foreign key`: `dl_job_events.job_id` without its REFERENCES (one RI trigger call per
  journal row).

Neither variant is something to run: 003 §4 declares `idempotency_key text UNIQUE`, the three
indexes and the foreign key (a user's own `ON CONFLICT (idempotency_key)` and promise 4's check
depend on them). The measure says what dropping them would buy.

    python -m bench.step_schema [--dsn postgresql://postgres@127.0.0.1:5432/postgres] [--jobs 8000] [--rounds 4]

Without --dsn (or BENCH_DSN) it starts an embedded PostgreSQL 18 (bench/pg.py). Prints per round
and variant the wall time, client CPU and the session's backend CPU per step (from /proc: the
server must be on this machine), and each variant's ratios to `003` in the same round.
"""

from __future__ import annotations

import asyncio

import asyncpg

from bench.step_statement import _drain, main, migrated_database

_ADD_IDEMPOTENCY_UNIQUE = """DO $$ BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_constraint WHERE conname = 'dl_jobs_idempotency_key_key') THEN
        ALTER TABLE dl_jobs ADD CONSTRAINT dl_jobs_idempotency_key_key UNIQUE (idempotency_key);
    END IF; END $$"""
_ADD_JOURNAL_FK = """DO $$ BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_constraint WHERE conname = 'dl_job_events_job_id_fkey') THEN
        ALTER TABLE dl_job_events ADD CONSTRAINT dl_job_events_job_id_fkey
            FOREIGN KEY (job_id) REFERENCES dl_jobs(job_id) ON DELETE CASCADE;
    END IF; END $$"""
_AS_MIGRATED = [
    "CREATE INDEX IF NOT EXISTS ix_dl_jobs_claim ON dl_jobs(queue, available_at, priority, created_at) "
    "WHERE status = 'queued'",
    "CREATE INDEX IF NOT EXISTS ix_dl_jobs_status_queue ON dl_jobs(status, queue)",
    "DROP INDEX IF EXISTS ix_bench_running_queue",
    "DROP INDEX IF EXISTS ux_bench_idempotency_key",
    _ADD_IDEMPOTENCY_UNIQUE,
    _ADD_JOURNAL_FK,
]
VARIANTS = {
    "003": _AS_MIGRATED,
    "lean indexes": [
        *_AS_MIGRATED[:-2],
        "DROP INDEX ix_dl_jobs_claim",
        "DROP INDEX ix_dl_jobs_status_queue",
        "CREATE INDEX ix_bench_running_queue ON dl_jobs(queue) WHERE status = 'running'",
        "ALTER TABLE dl_jobs DROP CONSTRAINT IF EXISTS dl_jobs_idempotency_key_key",
        "CREATE UNIQUE INDEX ux_bench_idempotency_key ON dl_jobs(idempotency_key) WHERE idempotency_key IS NOT NULL",
        _ADD_JOURNAL_FK,
    ],
    "no journal foreign key": [
        *_AS_MIGRATED[:-1],
        "ALTER TABLE dl_job_events DROP CONSTRAINT IF EXISTS dl_job_events_job_id_fkey",
    ],
}
_FIGURES = ("wall_us_per_step", "client_cpu_us_per_step", "db_cpu_us_per_step")


async def _reshape(dsn: str, variant: str) -> None:
    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute("TRUNCATE dl_jobs, dl_job_events")
        for statement in VARIANTS[variant]:
            await conn.execute(statement)
    finally:
        await conn.close()


async def _run(admin_dsn: str, jobs: int, rounds: int) -> None:
    async with migrated_database(admin_dsn, "schema") as dsn:
        names = list(VARIANTS)
        for round_ in range(rounds):
            figures = {}
            for variant in names[round_ % len(names):] + names[:round_ % len(names)]:
                await _reshape(dsn, variant)
                figures[variant] = await _drain(dsn, "one statement", jobs)
            await _reshape(dsn, "003")
            for variant in names:
                print(f"round {round_} {variant:22s} " + " ".join(
                    f"{k}={v:.1f}" for k, v in figures[variant].items()), flush=True)
            for variant in names[1:]:
                print(f"round {round_} {variant} / 003: " + " ".join(
                    f"{k}={figures[variant][k] / figures['003'][k]:.2f}" for k in _FIGURES), flush=True)


if __name__ == "__main__":
    asyncio.run(main(__doc__ or "", _run, rounds=4))
