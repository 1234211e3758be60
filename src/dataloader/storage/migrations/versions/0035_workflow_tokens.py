"""Wait tokens: a one-use secret a workflow hands to a third party, who completes it over HTTP
(`POST /api/v1/workflows/tokens/{token}`) without holding the API's token (docs/workflows.md).

- `dl_workflow_tokens`: one row per token, made by the run at a history position of kind `token`
  (its secret is that position's recorded result, so a replay hands out the same one; `(run_id,
  seq)` is unique, so a position cut off between making and recording its token keeps the first).
  `used_at`: set by the one completion that counts; a second is refused. The completion is stored
  as the run's signal `token:<seq>` and wakes the run, in the completion's transaction.
- `dl_workflow_steps.kind` also allows `token`.

Revision ID: 0035_workflow_tokens
Revises: 0034_workflow_deadline
"""

from alembic import op

revision = "0035_workflow_tokens"
down_revision = "0034_workflow_deadline"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute("""
        CREATE TABLE IF NOT EXISTS dl_workflow_tokens (
          token text PRIMARY KEY,
          run_id uuid NOT NULL REFERENCES dl_workflow_runs(run_id) ON DELETE CASCADE,
          seq int NOT NULL,
          name text NOT NULL,
          used_at timestamptz,
          created_at timestamptz NOT NULL DEFAULT now(),
          UNIQUE (run_id, seq)
        )
    """)
    op.execute("ALTER TABLE dl_workflow_steps DROP CONSTRAINT IF EXISTS dl_workflow_steps_kind")
    op.execute("ALTER TABLE dl_workflow_steps ADD CONSTRAINT dl_workflow_steps_kind "
               "CHECK (kind IN ('step', 'sleep', 'wait', 'gather', 'patch', 'token'))")


def downgrade() -> None:
    op.execute("DELETE FROM dl_workflow_steps WHERE kind = 'token'")
    op.execute("ALTER TABLE dl_workflow_steps DROP CONSTRAINT IF EXISTS dl_workflow_steps_kind")
    op.execute("ALTER TABLE dl_workflow_steps ADD CONSTRAINT dl_workflow_steps_kind "
               "CHECK (kind IN ('step', 'sleep', 'wait', 'gather', 'patch'))")
    op.execute("DROP TABLE IF EXISTS dl_workflow_tokens")
