"""The job's result: what its pipeline returned, stored when it succeeds.

A nullable jsonb column with no default is a catalog-only change (no table rewrite), so this is
instant on a large table; existing rows read NULL (no result). It is an addition, as the 003
schema contract asks: no 003 column changes, and a hand-applied 003 schema is adopted at 0001 and
then brought here like any other (`migrate.py` only checks that the 003 columns are present).
`finish_jobs.sql` writes it in the statement that marks the job succeeded, and
`finish_in_transaction.sql` leaves it NULL.

Revision ID: 0007_job_result
Revises: 0006_retry_budget
"""

from alembic import op

revision = "0007_job_result"
down_revision = "0006_retry_budget"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute("ALTER TABLE dl_jobs ADD COLUMN IF NOT EXISTS result jsonb")


def downgrade() -> None:
    op.execute("ALTER TABLE dl_jobs DROP COLUMN IF EXISTS result")
