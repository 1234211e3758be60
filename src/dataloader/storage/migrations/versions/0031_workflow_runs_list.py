"""Indexes for listing workflow runs newest first (`app.workflows.list`, GET /api/v1/workflows,
`dataloader workflows list`, the console's Workflows page).

Why: the listing pages by keyset on the run row's `(created_at, run_id)`, optionally for one
workflow. Without an index that order is a sort of every run (and `dl_workflow_runs` keeps every
run retention has not pruned), on every page of every console visit. With one, a page is an index
walk from the cursor that stops after `limit` rows.

What: `ix_dl_workflow_runs_created (created_at, run_id)` serves the unfiltered listing;
`ix_dl_workflow_runs_workflow (workflow, created_at, run_id)` the listing of one workflow. A status
filter is checked on the run's job (joined by its primary key) while the walk goes on.

Revision ID: 0031_workflow_runs_list
Revises: 0030_workflows
"""

from alembic import op

revision = "0031_workflow_runs_list"
down_revision = "0030_workflows"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute("CREATE INDEX IF NOT EXISTS ix_dl_workflow_runs_created ON dl_workflow_runs (created_at, run_id)")
    op.execute("CREATE INDEX IF NOT EXISTS ix_dl_workflow_runs_workflow "
               "ON dl_workflow_runs (workflow, created_at, run_id)")


def downgrade() -> None:
    op.execute("DROP INDEX IF EXISTS ix_dl_workflow_runs_workflow")
    op.execute("DROP INDEX IF EXISTS ix_dl_workflow_runs_created")
