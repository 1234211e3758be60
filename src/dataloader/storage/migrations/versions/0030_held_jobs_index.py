"""An index of held (dead-letter) jobs by queue (issue 20, the console's overview).

Why: the overview shows every queue's held count, and without an index that count reads every
failed row of the table (held_at is in no index): 200,000 failed rows took 170 ms of the
overview's 330 ms on a 1M-job table. Held jobs are few (dead letters an operator looks at), so a
partial index on them is small, and the finish paths pay nothing for it: the finish that holds a
job rewrites `status`, which other indexes already hold, so it was never a HOT update.

What: `ix_dl_jobs_held (queue) WHERE held_at IS NOT NULL`. Additions only (the 003 schema stays).

Revision ID: 0030_held_jobs_index
Revises: 0021_job_attempt_span
"""

from alembic import op

revision = "0030_held_jobs_index"
down_revision = "0021_job_attempt_span"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute("CREATE INDEX IF NOT EXISTS ix_dl_jobs_held ON dl_jobs (queue) WHERE held_at IS NOT NULL")


def downgrade() -> None:
    op.execute("DROP INDEX IF EXISTS ix_dl_jobs_held")
