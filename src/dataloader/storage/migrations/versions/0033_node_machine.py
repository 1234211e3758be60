"""Where a node runs: `dl_nodes.machine` = the boot's id and the pid namespace (dataloader/machine.py).

Why: a node restarted after kill -9 on the same machine can then see that its previous
incarnation's pid no longer runs and take its jobs back at once (jobs/reaper.py) instead of after
their leases. Rows written before this migration, or on a system without /proc, have NULL: no
node judges them, and their jobs come back when their leases run out, as before.

Revision ID: 0033_node_machine
Revises: 0032_chain_joins
"""

from alembic import op

revision = "0033_node_machine"
down_revision = "0032_chain_joins"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # no index: the nodes that may still run are a handful of rows (ix_dl_nodes_live finds them)
    op.execute("ALTER TABLE dl_nodes ADD COLUMN IF NOT EXISTS machine text")


def downgrade() -> None:
    op.execute("ALTER TABLE dl_nodes DROP COLUMN IF EXISTS machine")
