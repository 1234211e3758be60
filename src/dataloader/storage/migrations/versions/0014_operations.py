"""Recovery and operations: the search index, queue-time flags, held jobs, and the
tables of tracked bulk operations.

- ix_dl_jobs_trouble (status, created_at, job_id) over failed, canceled and lost rows only: what
  an operator searches and acts on at 3 a.m. ("every failed job of queue X since the deploy").
  A search or a bulk batch with one of those statuses walks it in (created_at, job_id) order and
  stops at its page, however many rows the table holds. Partial: a job that succeeds never enters
  it, so the hot path (insert queued, claim, heartbeat, succeed) pays nothing for it. Searches of
  other statuses use the 0003 (created_at, job_id) index or the spec's (status, queue) index.
- dl_jobs.queue_overdue_at: when the queue-time checker found the job waiting past its queue's
  limit (NULL: never, or not since it last became runnable). A flag, not a status: the job still
  waits and runs normally unless the queue is set to fail overdue jobs.
- dl_jobs.held_at / held_reason: a held job (dead letter) is a `failed` row with held_at set.
  Not a new dl_status value: the spec's status enum is a contract every reader of dl_jobs
  relies on (a held job *has* failed: it is finished, it will not run), and ALTER TYPE ... ADD
  VALUE cannot be used in the transaction that adds it (PostgreSQL 12+; Alembic runs each
  migration in one transaction), so indexes or defaults naming it could not ship here. Nullable
  columns without defaults: catalog-only, instant on a large table.
- dl_operations: one row per tracked bulk operation (requeue, cancel, delete, set priority over a
  filter): the filter, the count a dry run saw, progress, state, who started it, and a lease
  (owner, expiry, epoch) so another node continues it when its runner dies. The keyset cursor
  (created_at, job_id) of the last job handled is advanced in the transaction that changes the
  batch's jobs, so no job is handled twice, even across a takeover.
- dl_operation_events: the audit trail of operations (created, paused, resumed, canceled, taken
  over, finished, failed); it stays after the operation ends and is never pruned with jobs.

Revision ID: 0014_operations
Revises: 0013_nodes_observers
"""

from alembic import op

revision = "0014_operations"
down_revision = "0013_nodes_observers"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(
        "CREATE INDEX IF NOT EXISTS ix_dl_jobs_trouble ON dl_jobs(status, created_at, job_id) "
        "WHERE status IN ('failed', 'canceled', 'lost')"
    )
    op.execute("ALTER TABLE dl_jobs ADD COLUMN IF NOT EXISTS queue_overdue_at timestamptz")
    op.execute("ALTER TABLE dl_jobs ADD COLUMN IF NOT EXISTS held_at timestamptz")
    op.execute("ALTER TABLE dl_jobs ADD COLUMN IF NOT EXISTS held_reason text")
    op.execute("""
        CREATE TABLE IF NOT EXISTS dl_operations (
            operation_id uuid PRIMARY KEY,
            kind text NOT NULL CHECK (kind IN ('requeue', 'cancel', 'delete', 'set_priority')),
            filter jsonb NOT NULL,
            params jsonb NOT NULL DEFAULT '{}'::jsonb,
            state text NOT NULL DEFAULT 'running'
                CHECK (state IN ('running', 'paused', 'canceled', 'finished', 'failed')),
            total bigint NOT NULL DEFAULT 0,
            done bigint NOT NULL DEFAULT 0,
            changed bigint NOT NULL DEFAULT 0,
            batch_size int NOT NULL DEFAULT 500 CHECK (batch_size > 0),
            cursor_created_at timestamptz,
            cursor_job_id uuid,
            snapshot_at timestamptz NOT NULL DEFAULT now(),
            started_by text NOT NULL,
            lease_owner text,
            lease_expires_at timestamptz,
            lease_epoch int NOT NULL DEFAULT 0,
            error text,
            created_at timestamptz NOT NULL DEFAULT now(),
            updated_at timestamptz NOT NULL DEFAULT now(),
            finished_at timestamptz
        )""")
    op.execute("CREATE INDEX IF NOT EXISTS ix_dl_operations_runnable ON dl_operations(lease_expires_at) "
               "WHERE state = 'running'")
    op.execute("CREATE INDEX IF NOT EXISTS ix_dl_operations_created ON dl_operations(created_at, operation_id)")
    op.execute("""
        CREATE TABLE IF NOT EXISTS dl_operation_events (
            event_id bigserial PRIMARY KEY,
            operation_id uuid NOT NULL,
            ts timestamptz NOT NULL DEFAULT now(),
            kind text NOT NULL,
            actor text,
            payload jsonb
        )""")
    op.execute("CREATE INDEX IF NOT EXISTS ix_dl_operation_events_op ON dl_operation_events(operation_id, event_id)")


def downgrade() -> None:
    op.execute("DROP TABLE IF EXISTS dl_operation_events, dl_operations")
    op.execute("ALTER TABLE dl_jobs DROP COLUMN IF EXISTS held_reason, DROP COLUMN IF EXISTS held_at, "
               "DROP COLUMN IF EXISTS queue_overdue_at")
    op.execute("DROP INDEX IF EXISTS ix_dl_jobs_trouble")
