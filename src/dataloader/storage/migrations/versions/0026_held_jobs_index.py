"""A partial index on held jobs: `ix_dl_jobs_held ON dl_jobs(queue) WHERE held_at IS NOT
NULL AND status = 'failed'`.

Why: /metrics reports held jobs per queue (dl_jobs_held) on every scrape of every node. Without
this index that count walks every `failed` row (ix_dl_jobs_trouble), millions in a store that keeps
failures; with it, only the held ones, which an operator releases or deletes. Held jobs are few,
so the index is small and costs nothing on the claim/finish path of jobs that are not held.

Revision ID: 0026_held_jobs_index
Revises: 0025_task_pause
"""

from alembic import op

revision = "0026_held_jobs_index"
down_revision = "0025_task_pause"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute("CREATE INDEX IF NOT EXISTS ix_dl_jobs_held ON dl_jobs(queue) "
               "WHERE held_at IS NOT NULL AND status = 'failed'")


def downgrade() -> None:
    op.execute("DROP INDEX IF EXISTS ix_dl_jobs_held")
