"""Heartbeats journaled at most hourly per attempt: `heartbeat_journaled_at timestamptz`.

Every heartbeat (every DL_HEARTBEAT_SEC, 10 s by default) used to insert a `heartbeat` journal row:
360 rows per running job-hour, most of the journal of long jobs. The spec keeps `heartbeat` as a
journal kind, so it stays meaningful instead: an attempt's first heartbeat is journaled, then at
most one per hour (`heartbeat_jobs.sql`). The lease itself is still extended on every beat in the
row (`heartbeat_at`, `lease_expires_at`), where liveness is read from. This column remembers when
the attempt last journaled one; the claim resets it. Nullable, no default: catalog-only.

Revision ID: 0015_heartbeat_journal
Revises: 0014_operations
"""

from alembic import op

revision = "0015_heartbeat_journal"
down_revision = "0014_operations"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute("ALTER TABLE dl_jobs ADD COLUMN IF NOT EXISTS heartbeat_journaled_at timestamptz")


def downgrade() -> None:
    op.execute("ALTER TABLE dl_jobs DROP COLUMN IF EXISTS heartbeat_journaled_at")
