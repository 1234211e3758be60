"""Processes (issue 9): filled in by its change.

Revision ID: 0012_processes
Revises: 0011_queue_patterns
"""

revision = "0012_processes"
down_revision = "0011_queue_patterns"
branch_labels = None
depends_on = None


def upgrade() -> None:
    pass


def downgrade() -> None:
    pass
