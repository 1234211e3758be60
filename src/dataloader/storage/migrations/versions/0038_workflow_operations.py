"""Bulk operations over workflow runs found by search (docs/operations.md, docs/workflows.md).

- The kinds `workflow_cancel`, `workflow_restart` and `workflow_retry`: a tracked operation over
  the runs a filter matches, each run changed as `app.workflows.cancel` / `restart` does. Its
  keyset cursor is the run's (created_at, run_id), kept in the job cursor's columns (a run id is
  its job's id).
- `dl_operations.failed bigint`: runs (or jobs, processes) examined whose change was refused for a
  reason of their own (a restart from a step the run never recorded, from before a gather), apart
  from the skipped ones, which were no longer eligible (a run that had not ended, or had). Kinds
  that have no such refusal leave it 0.

A column with a constant default and a changed CHECK: catalog-only, no table rewrite.

Revision ID: 0038_workflow_operations
Revises: 0037_workflow_generations
"""

from alembic import op

revision = "0038_workflow_operations"
down_revision = "0037_workflow_generations"
branch_labels = None
depends_on = None

KINDS = "'requeue', 'cancel', 'delete', 'set_priority', 'process_restart'"
WORKFLOW_KINDS = "'workflow_cancel', 'workflow_restart', 'workflow_retry'"


def upgrade() -> None:
    op.execute("ALTER TABLE dl_operations ADD COLUMN IF NOT EXISTS failed bigint NOT NULL DEFAULT 0")
    op.execute("ALTER TABLE dl_operations DROP CONSTRAINT IF EXISTS dl_operations_kind_check")
    op.execute(f"ALTER TABLE dl_operations ADD CONSTRAINT dl_operations_kind_check "
               f"CHECK (kind IN ({KINDS}, {WORKFLOW_KINDS}))")


def downgrade() -> None:
    op.execute(f"DELETE FROM dl_operations WHERE kind IN ({WORKFLOW_KINDS})")
    op.execute("ALTER TABLE dl_operations DROP CONSTRAINT IF EXISTS dl_operations_kind_check")
    op.execute(f"ALTER TABLE dl_operations ADD CONSTRAINT dl_operations_kind_check CHECK (kind IN ({KINDS}))")
    op.execute("ALTER TABLE dl_operations DROP COLUMN IF EXISTS failed")
