"""Indexes the engine's queries need beyond the specification's.

- lock_key of active jobs: the claim skips keys that already run, and a finish wakes the jobs
  waiting on its key; both look jobs up by lock_key.
- journal by job: the events endpoint reads one job's history, and ON DELETE CASCADE from
  dl_jobs would otherwise scan the whole journal.

Revision ID: 0002_engine_indexes
Revises: 0001_spec_schema
"""

from alembic import op

revision = "0002_engine_indexes"
down_revision = "0001_spec_schema"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(
        "CREATE INDEX IF NOT EXISTS ix_dl_jobs_lock_key_active ON dl_jobs(lock_key, status) "
        "WHERE status IN ('queued', 'running')"
    )
    op.execute("CREATE INDEX IF NOT EXISTS ix_dl_job_events_job ON dl_job_events(job_id, event_id)")


def downgrade() -> None:
    op.execute("DROP INDEX IF EXISTS ix_dl_jobs_lock_key_active")
    op.execute("DROP INDEX IF EXISTS ix_dl_job_events_job")
