"""Process recovery: restart a process from its start or from a step, one or many.

- `dl_process_tasks.state_before jsonb`: the process as the task found it (status, detail,
  corrupted_by, aux_state — bytes as base64 —, metadata, last_event_id and the timer), written by
  the statement that applies the task's step (apply_step.sql reads the row it replaces in the
  same statement, so the copy costs no round trip). A restart from this task puts it back. An
  event-sourced history could rebuild the events but not `aux_state`: it is the processor's own
  opaque snapshot, so the engine must keep it to go back to it.
- `dl_process_tasks.restart_of uuid`: a task queued by a restart names the task it runs again
  (the trace shows both).
- `dl_operations.cursor_process_id text` and the kind `process_restart`: a bulk restart is a
  tracked operation like the job ones, its keyset cursor being the process id.

Nullable columns without defaults: catalog-only changes, no table rewrite.

Revision ID: 0016_process_recovery
Revises: 0015_heartbeat_journal
"""

from alembic import op

revision = "0016_process_recovery"
down_revision = "0015_heartbeat_journal"
branch_labels = None
depends_on = None

KINDS = "'requeue', 'cancel', 'delete', 'set_priority'"


def upgrade() -> None:
    op.execute("ALTER TABLE dl_process_tasks ADD COLUMN IF NOT EXISTS state_before jsonb")
    op.execute("ALTER TABLE dl_process_tasks ADD COLUMN IF NOT EXISTS restart_of uuid")
    op.execute("ALTER TABLE dl_operations ADD COLUMN IF NOT EXISTS cursor_process_id text")
    op.execute("ALTER TABLE dl_operations DROP CONSTRAINT IF EXISTS dl_operations_kind_check")
    op.execute(f"ALTER TABLE dl_operations ADD CONSTRAINT dl_operations_kind_check "
               f"CHECK (kind IN ({KINDS}, 'process_restart'))")


def downgrade() -> None:
    op.execute("DELETE FROM dl_operations WHERE kind = 'process_restart'")
    op.execute("ALTER TABLE dl_operations DROP CONSTRAINT IF EXISTS dl_operations_kind_check")
    op.execute(f"ALTER TABLE dl_operations ADD CONSTRAINT dl_operations_kind_check CHECK (kind IN ({KINDS}))")
    op.execute("ALTER TABLE dl_operations DROP COLUMN IF EXISTS cursor_process_id")
    op.execute("ALTER TABLE dl_process_tasks DROP COLUMN IF EXISTS restart_of")
    op.execute("ALTER TABLE dl_process_tasks DROP COLUMN IF EXISTS state_before")
