"""Chains and restartable jobs: four nullable columns on dl_jobs and two partial indexes.

- `chain_id uuid`: the first job of a multi-stage run; every stage carries it, so a chain's history
  is one indexed query. NULL for jobs that are not part of a chain (no cost for them).
- `parent_job_id uuid`: the stage whose success enqueued this one. No foreign key: retention
  deletes finished jobs oldest first, and a pruned parent must not take its children with it.
- `chain_next jsonb`: the stages still to run after this one (enqueued by the finish that ends it
  as succeeded, in the same statement).
- `restart_key text`: set only while a restartable job is queued and not yet claimed. The unique
  partial index makes that row absorb every re-trigger (args and time updated in place); the
  claim and a cancel clear the column, so a job that runs, retries or is retried never conflicts
  with the next trigger, which queues behind it on the same lock_key.

New nullable columns without defaults are catalog-only changes (no rewrite). The indexes are
partial on columns that are NULL for every existing row, so they stay tiny; building them still
reads the table once (not CONCURRENTLY: Alembic runs in a transaction; see docs/deploy.md).

Revision ID: 0011_queue_patterns
Revises: 0010_run_timeout
"""

from alembic import op

revision = "0011_queue_patterns"
down_revision = "0010_run_timeout"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute("ALTER TABLE dl_jobs ADD COLUMN IF NOT EXISTS chain_id uuid")
    op.execute("ALTER TABLE dl_jobs ADD COLUMN IF NOT EXISTS parent_job_id uuid")
    op.execute("ALTER TABLE dl_jobs ADD COLUMN IF NOT EXISTS chain_next jsonb")
    op.execute("ALTER TABLE dl_jobs ADD COLUMN IF NOT EXISTS restart_key text")
    op.execute("CREATE INDEX IF NOT EXISTS ix_dl_jobs_chain ON dl_jobs (chain_id, created_at) "
               "WHERE chain_id IS NOT NULL")
    op.execute("CREATE UNIQUE INDEX IF NOT EXISTS ux_dl_jobs_restart_key ON dl_jobs (restart_key) "
               "WHERE status = 'queued' AND restart_key IS NOT NULL")


def downgrade() -> None:
    op.execute("DROP INDEX IF EXISTS ux_dl_jobs_restart_key")
    op.execute("DROP INDEX IF EXISTS ix_dl_jobs_chain")
    for column in ("restart_key", "chain_next", "parent_job_id", "chain_id"):
        op.execute(f"ALTER TABLE dl_jobs DROP COLUMN IF EXISTS {column}")
