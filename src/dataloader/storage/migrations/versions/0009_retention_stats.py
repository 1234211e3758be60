"""Retention and stats: the index the pruner and the stats rollup walk, and the rollup
tables the stats read.

- ix_dl_jobs_finished (queue, status, finished_at) over finished rows only: the pruner deletes
  `queue = $1 AND status = $2 AND finished_at < cutoff ORDER BY finished_at LIMIT n` as one index
  range (no row of another queue, status or age is ever read), and the rollup reads the rows
  finished in a time window the same way per (queue, status). The distinct queues come from the
  same index by a loose scan (one probe per queue). Partial: queued and running rows, which the
  claim, heartbeats and finishes touch, are not in it, so it costs the hot path one index entry
  per finished job and nothing per claim or heartbeat.
- dl_stats_hourly / dl_stats_hist / dl_stats_errors: hourly buckets per queue and status (counts,
  run and wait sums, a log-bucket histogram for p95, error groups), upserted by the leader's
  stats service from the rows finished since dl_stats_state.watermark. Reading a month of stats
  reads a few thousand rollup rows whatever the size of dl_jobs, and the numbers outlive the
  jobs the pruner deletes.

Revision ID: 0009_retention_stats
Revises: 0008_schedules
"""

from alembic import op

revision = "0009_retention_stats"
down_revision = "0008_schedules"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(
        "CREATE INDEX IF NOT EXISTS ix_dl_jobs_finished ON dl_jobs(queue, status, finished_at) "
        "WHERE status IN ('succeeded', 'failed', 'canceled', 'lost')"
    )
    op.execute("""
        CREATE TABLE IF NOT EXISTS dl_stats_hourly (
            hour timestamptz NOT NULL,
            queue text NOT NULL,
            status text NOT NULL,
            jobs bigint NOT NULL DEFAULT 0,
            run_count bigint NOT NULL DEFAULT 0,
            run_sum float8 NOT NULL DEFAULT 0,
            run_max float8,
            wait_count bigint NOT NULL DEFAULT 0,
            wait_sum float8 NOT NULL DEFAULT 0,
            wait_max float8,
            PRIMARY KEY (hour, queue, status)
        )""")
    op.execute("""
        CREATE TABLE IF NOT EXISTS dl_stats_hist (
            hour timestamptz NOT NULL,
            queue text NOT NULL,
            status text NOT NULL,
            metric text NOT NULL CHECK (metric IN ('run', 'wait')),
            bucket smallint NOT NULL,
            jobs bigint NOT NULL DEFAULT 0,
            PRIMARY KEY (hour, queue, status, metric, bucket)
        )""")
    op.execute("""
        CREATE TABLE IF NOT EXISTS dl_stats_errors (
            hour timestamptz NOT NULL,
            queue text NOT NULL,
            error text NOT NULL,
            jobs bigint NOT NULL DEFAULT 0,
            last_at timestamptz NOT NULL,
            last_job_id uuid NOT NULL,
            PRIMARY KEY (hour, queue, error)
        )""")
    op.execute("""
        CREATE TABLE IF NOT EXISTS dl_stats_state (
            id int PRIMARY KEY CHECK (id = 1),
            watermark timestamptz NOT NULL
        )""")


def downgrade() -> None:
    op.execute("DROP TABLE IF EXISTS dl_stats_state, dl_stats_errors, dl_stats_hist, dl_stats_hourly")
    op.execute("DROP INDEX IF EXISTS ix_dl_jobs_finished")
