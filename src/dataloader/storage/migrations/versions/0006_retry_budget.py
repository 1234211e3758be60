"""Attempts used before the last manual retry, so a retried job gets a fresh budget.

`attempt` is the fencing token of every write (heartbeat, progress, finish are applied only to
`running` with that attempt), so it must only ever grow: resetting it on retry could let a worker
from the job's earlier life, still alive after the reaper marked the job lost, write into the new
run. Instead the budget counts attempts since the last retry: a job may run again while
`attempt - attempts_before_retry < max_attempts`. Adding a column with a constant default is a
catalog-only change (no table rewrite), so this migration is instant on a large table.

Revision ID: 0006_retry_budget
Revises: 0005_cheaper_notify_triggers
"""

from alembic import op

revision = "0006_retry_budget"
down_revision = "0005_cheaper_notify_triggers"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute("ALTER TABLE dl_jobs ADD COLUMN IF NOT EXISTS attempts_before_retry int NOT NULL DEFAULT 0")


def downgrade() -> None:
    op.execute("ALTER TABLE dl_jobs DROP COLUMN IF EXISTS attempts_before_retry")
