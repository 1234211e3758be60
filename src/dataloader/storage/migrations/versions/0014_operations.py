"""Recovery and operations: held jobs, bulk operations (issue 11): filled in by its change.

Revision ID: 0014_operations
Revises: 0013_nodes_observers
"""

revision = "0014_operations"
down_revision = "0013_nodes_observers"
branch_labels = None
depends_on = None


def upgrade() -> None:
    pass


def downgrade() -> None:
    pass
