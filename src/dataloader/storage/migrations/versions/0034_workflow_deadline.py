"""A deadline for a whole workflow run (`app.workflows.start(..., deadline=...)`).

`dl_workflow_runs.deadline_at`: when the run must have ended; NULL: never. A child run started by a
gather gets its parent's. A run past it fails at its next attempt (a sleep, a wait or a join is
handed back no later than the deadline, so a waiting run wakes for it) and a running one is
interrupted at its next await; its unfinished children are canceled with it (workflows/runner.py).
A restart clears it (the run was given up; running it again is a new decision).

Revision ID: 0034_workflow_deadline
Revises: 0033_node_machine
"""

from alembic import op

revision = "0034_workflow_deadline"
down_revision = "0033_node_machine"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute("ALTER TABLE dl_workflow_runs ADD COLUMN IF NOT EXISTS deadline_at timestamptz")


def downgrade() -> None:
    op.execute("ALTER TABLE dl_workflow_runs DROP COLUMN IF EXISTS deadline_at")
