"""Processes: event-sourced state machines built on the job engine.

- `dl_processes`: one row per process (PK ns, id): status, detail, aux_state (jsonb, or bytea
  when the processor keeps bytes), metadata, corrupted_by, previous_status, status_changed_at, the
  armed timer (its task, type and due time) and `version`, bumped by every write, so a step that
  read the process before running its processor can tell that nobody changed it meanwhile.
- `dl_process_events`: the append-only history (PK ns, process_id, event_id; bigint, no cap).
- `dl_process_tasks`: every task (init, call, repair, timeout, remove) with its args, status,
  times, idempotency key and response. task_id is the id of the `dl_jobs` row that runs it (no
  foreign key: the pruner may delete finished jobs; the task row stays for the trace).
- `dl_process_feed`: the durable, ordered feed of events and lifecycle changes. Each row carries
  the id of the transaction that wrote it (`pg_current_xact_id()`, xid8): a reader serves only rows
  whose transaction is older than every transaction still running, so a row that commits late can
  never be skipped by a cursor that has moved past it (a bigserial alone can: ids are taken in one
  order and commit in another). No foreign key: a removed process keeps its `remove` row.

New tables only; dl_jobs is untouched (process tasks are ordinary jobs of queue `process:<ns>`).

Revision ID: 0012_processes
Revises: 0011_queue_patterns
"""

from alembic import op

revision = "0012_processes"
down_revision = "0011_queue_patterns"
branch_labels = None
depends_on = None

STATEMENTS = [
    """
    CREATE TABLE IF NOT EXISTS dl_processes (
      ns text NOT NULL,
      id text NOT NULL,
      status text NOT NULL,
      detail text,
      aux_state jsonb,
      aux_state_bytes bytea,
      metadata jsonb NOT NULL DEFAULT '{}'::jsonb,
      corrupted_by uuid,
      previous_status text,
      status_changed_at timestamptz NOT NULL DEFAULT now(),
      created_at timestamptz NOT NULL DEFAULT now(),
      updated_at timestamptz NOT NULL DEFAULT now(),
      version bigint NOT NULL DEFAULT 1,
      last_event_id bigint NOT NULL DEFAULT 0,
      timer_task_id uuid,
      timer_type text,
      timer_at timestamptz,
      PRIMARY KEY (ns, id),
      CONSTRAINT dl_processes_chk_status CHECK (status IN ('init', 'running', 'error')),
      CONSTRAINT dl_processes_chk_timer CHECK (timer_type IS NULL OR timer_type IN ('timeout', 'remove'))
    )
    """,
    "CREATE INDEX IF NOT EXISTS ix_dl_processes_status ON dl_processes (ns, status, id)",
    """
    CREATE TABLE IF NOT EXISTS dl_process_events (
      ns text NOT NULL,
      process_id text NOT NULL,
      event_id bigint NOT NULL,
      task_id uuid,
      ts timestamptz NOT NULL DEFAULT now(),
      metadata jsonb,
      payload jsonb,
      PRIMARY KEY (ns, process_id, event_id),
      FOREIGN KEY (ns, process_id) REFERENCES dl_processes (ns, id) ON DELETE CASCADE
    )
    """,
    """
    CREATE TABLE IF NOT EXISTS dl_process_tasks (
      task_id uuid PRIMARY KEY,
      ns text NOT NULL,
      process_id text NOT NULL,
      task_type text NOT NULL,
      args jsonb,
      history_range jsonb,
      idempotency_key text,
      status text NOT NULL DEFAULT 'waiting',
      response jsonb,
      error text,
      scheduled_at timestamptz NOT NULL DEFAULT now(),
      created_at timestamptz NOT NULL DEFAULT now(),
      finished_at timestamptz,
      FOREIGN KEY (ns, process_id) REFERENCES dl_processes (ns, id) ON DELETE CASCADE,
      CONSTRAINT dl_process_tasks_chk_type CHECK (task_type IN ('init', 'call', 'repair', 'timeout', 'remove')),
      CONSTRAINT dl_process_tasks_chk_status CHECK (status IN ('waiting', 'finished', 'error', 'cancelled'))
    )
    """,
    "CREATE INDEX IF NOT EXISTS ix_dl_process_tasks_process ON dl_process_tasks (ns, process_id, created_at)",
    """CREATE UNIQUE INDEX IF NOT EXISTS ux_dl_process_tasks_idempotency
       ON dl_process_tasks (ns, idempotency_key) WHERE idempotency_key IS NOT NULL""",
    """
    CREATE TABLE IF NOT EXISTS dl_process_feed (
      seq bigserial PRIMARY KEY,
      xid xid8 NOT NULL DEFAULT pg_current_xact_id(),
      ns text NOT NULL,
      process_id text NOT NULL,
      kind text NOT NULL,
      event_id bigint,
      task_id uuid,
      ts timestamptz NOT NULL DEFAULT now(),
      payload jsonb,
      metadata jsonb
    )
    """,
    "CREATE INDEX IF NOT EXISTS ix_dl_process_feed_cursor ON dl_process_feed (ns, xid, seq)",
]


def upgrade() -> None:
    for statement in STATEMENTS:
        op.execute(statement)


def downgrade() -> None:
    op.execute("DROP TABLE IF EXISTS dl_process_feed")
    op.execute("DROP TABLE IF EXISTS dl_process_tasks")
    op.execute("DROP TABLE IF EXISTS dl_process_events")
    op.execute("DROP TABLE IF EXISTS dl_processes")
