"""Index for the HTTP job listing: newest first with a (created_at, job_id) cursor.

Without it GET /api/v1/jobs sorts the whole table on every page. One index only: every index is
paid for on each enqueue, and a queue/task/status filter is cheap to apply while walking this one.

Revision ID: 0003_api_list_index
Revises: 0002_engine_indexes
"""

from alembic import op

revision = "0003_api_list_index"
down_revision = "0002_engine_indexes"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute("CREATE INDEX IF NOT EXISTS ix_dl_jobs_created ON dl_jobs(created_at, job_id)")


def downgrade() -> None:
    op.execute("DROP INDEX IF EXISTS ix_dl_jobs_created")
