"""Chains, restartable and unique jobs (issue 10): filled in by its change.

Revision ID: 0011_queue_patterns
Revises: 0010_run_timeout
"""

revision = "0011_queue_patterns"
down_revision = "0010_run_timeout"
branch_labels = None
depends_on = None


def upgrade() -> None:
    pass


def downgrade() -> None:
    pass
