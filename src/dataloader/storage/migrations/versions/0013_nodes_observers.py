"""The node registry and observers (issue 12): filled in by its change.

Revision ID: 0013_nodes_observers
Revises: 0012_processes
"""

revision = "0013_nodes_observers"
down_revision = "0012_processes"
branch_labels = None
depends_on = None


def upgrade() -> None:
    pass


def downgrade() -> None:
    pass
