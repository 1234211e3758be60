"""The job's own run-time limit: `timeout_sec int NULL`.

A new nullable column with no default is a catalog-only change (no table rewrite), like 0007's
`result`. NULL means "no limit of its own": the pipeline's `@pipeline(timeout=...)` applies, or
none. Not folded into an existing 003 column: `lease_ttl_sec` is how long a silent worker keeps
its lease (heartbeats renew it, so a healthy attempt may run for days), which is a different
promise; and `args` belong to the pipeline (a key there could collide with a user's). The claim
returns the column with the job, so the limit costs no extra round trip.

Revision ID: 0010_run_timeout
Revises: 0009_retention_stats
"""

from alembic import op

revision = "0010_run_timeout"
down_revision = "0009_retention_stats"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute("ALTER TABLE dl_jobs ADD COLUMN IF NOT EXISTS timeout_sec int")


def downgrade() -> None:
    op.execute("ALTER TABLE dl_jobs DROP COLUMN IF EXISTS timeout_sec")
