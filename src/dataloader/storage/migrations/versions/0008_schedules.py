"""Periodic schedules: `dl_schedules` (one row per schedule: what to enqueue, when, and the next
due tick) and `dl_schedule_runs` (one row per tick that enqueued a job: the history).

New tables only; no 003 column changes. Exactly one job per (schedule, tick) is guaranteed by the
database twice over: the scheduler advances `next_run_at` with a compare-and-set on `revision` in
the transaction that inserts the tick's job, and the job's `idempotency_key`
(`schedule:<name>:<tick>`) plus the runs table's primary key (schedule_name, tick_at) are unique.
The partial index serves the due query (`storage/queries/schedules/due_schedules.sql`).

Revision ID: 0008_schedules
Revises: 0007_job_result
"""

from alembic import op

revision = "0008_schedules"
down_revision = "0007_job_result"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(
        """
        CREATE TABLE IF NOT EXISTS dl_schedules (
          name text PRIMARY KEY,
          task text NOT NULL,
          queue text NOT NULL DEFAULT 'default',
          args jsonb NOT NULL DEFAULT '{}'::jsonb,
          cron text,
          every_ms bigint,
          timezone text NOT NULL DEFAULT 'UTC',
          missed text NOT NULL DEFAULT 'run_once',
          catch_up_limit int NOT NULL DEFAULT 10,
          grace_sec int NOT NULL DEFAULT 60,
          lock_key text,
          priority int NOT NULL DEFAULT 100,
          max_attempts int,
          lease_ttl_sec int,
          paused boolean NOT NULL DEFAULT false,
          source text NOT NULL DEFAULT 'api',
          revision bigint NOT NULL DEFAULT 1,
          next_run_at timestamptz NOT NULL,
          last_run_at timestamptz,
          created_at timestamptz NOT NULL DEFAULT now(),
          updated_at timestamptz NOT NULL DEFAULT now(),
          CONSTRAINT dl_schedules_chk_timing CHECK ((cron IS NULL) <> (every_ms IS NULL)),
          CONSTRAINT dl_schedules_chk_every CHECK (every_ms IS NULL OR every_ms > 0),
          CONSTRAINT dl_schedules_chk_missed CHECK (missed IN ('skip', 'run_once', 'catch_up')),
          CONSTRAINT dl_schedules_chk_source CHECK (source IN ('code', 'api'))
        )
        """
    )
    op.execute("CREATE INDEX IF NOT EXISTS ix_dl_schedules_due ON dl_schedules (next_run_at) WHERE NOT paused")
    op.execute(
        """
        CREATE TABLE IF NOT EXISTS dl_schedule_runs (
          schedule_name text NOT NULL REFERENCES dl_schedules(name) ON DELETE CASCADE,
          tick_at timestamptz NOT NULL,
          job_id uuid NOT NULL,
          enqueued_at timestamptz NOT NULL DEFAULT now(),
          lag_sec double precision NOT NULL DEFAULT 0,
          skipped_before int NOT NULL DEFAULT 0,
          PRIMARY KEY (schedule_name, tick_at)
        )
        """
    )


def downgrade() -> None:
    op.execute("DROP TABLE IF EXISTS dl_schedule_runs")
    op.execute("DROP TABLE IF EXISTS dl_schedules")
