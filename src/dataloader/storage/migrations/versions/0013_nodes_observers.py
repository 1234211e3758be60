"""The node registry and observers: `dl_nodes` (one row per incarnation of a service
instance: a restart is a new row under the same name) and `dl_observers` (one row per observer:
its definition, desired state, lifecycle state, the node holding it and the fencing epoch).

New tables only; no 003 column changes. Ownership of a running observer is `node_id` plus `epoch`:
a node claims an observer (epoch + 1) only while its own row is `live`; a node that stops
heartbeating is marked `dead` by any other node with a compare-and-set on `heartbeat_at`, and its
observers are released in the same statement (`storage/queries/nodes/heartbeat.sql`). Every write
of a running observer is fenced on (name, epoch). The partial indexes serve the claim (waiting
observers) and the per-node lookups (stop requests, load).

Revision ID: 0013_nodes_observers
Revises: 0012_processes
"""

from alembic import op

revision = "0013_nodes_observers"
down_revision = "0012_processes"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(
        """
        CREATE TABLE IF NOT EXISTS dl_nodes (
          node_id uuid PRIMARY KEY,
          name text NOT NULL,
          host text NOT NULL,
          pid int NOT NULL,
          version text NOT NULL,
          started_at timestamptz NOT NULL DEFAULT now(),
          heartbeat_at timestamptz NOT NULL DEFAULT now(),
          capacity int NOT NULL DEFAULT 0,
          queues text[] NOT NULL DEFAULT '{}',
          kinds text[] NOT NULL DEFAULT '{}',
          state text NOT NULL DEFAULT 'live',
          stopped_at timestamptz,
          superseded_by uuid,
          CONSTRAINT dl_nodes_chk_state CHECK (state IN ('live', 'superseded', 'dead', 'stopped')),
          CONSTRAINT dl_nodes_chk_capacity CHECK (capacity >= 0)
        )
        """
    )
    op.execute("CREATE INDEX IF NOT EXISTS ix_dl_nodes_live ON dl_nodes (heartbeat_at) "
               "WHERE state IN ('live', 'superseded')")
    op.execute("CREATE INDEX IF NOT EXISTS ix_dl_nodes_name ON dl_nodes (name, started_at DESC)")
    op.execute(
        """
        CREATE TABLE IF NOT EXISTS dl_observers (
          name text PRIMARY KEY,
          kind text NOT NULL,
          args jsonb NOT NULL DEFAULT '{}'::jsonb,
          desired text NOT NULL DEFAULT 'run',
          state text NOT NULL DEFAULT 'created',
          node_id uuid,
          last_node_id uuid,
          epoch bigint NOT NULL DEFAULT 0,
          failures int NOT NULL DEFAULT 0,
          max_restarts int,
          moves int NOT NULL DEFAULT 0,
          restart_at timestamptz NOT NULL DEFAULT now(),
          reason text,
          last_error text,
          last_error_at timestamptz,
          checkpoint jsonb,
          status jsonb,
          created_at timestamptz NOT NULL DEFAULT now(),
          updated_at timestamptz NOT NULL DEFAULT now(),
          started_at timestamptz,
          stop_requested_at timestamptz,
          stopped_at timestamptz,
          CONSTRAINT dl_observers_chk_desired CHECK (desired IN ('run', 'stop')),
          CONSTRAINT dl_observers_chk_state CHECK (
            state IN ('created', 'processing', 'on_deleting', 'deleted', 'failed')),
          CONSTRAINT dl_observers_chk_holder CHECK ((node_id IS NOT NULL) = (state IN ('processing', 'on_deleting')))
        )
        """
    )
    op.execute("CREATE INDEX IF NOT EXISTS ix_dl_observers_waiting ON dl_observers (restart_at) "
               "WHERE state = 'created'")
    op.execute("CREATE INDEX IF NOT EXISTS ix_dl_observers_node ON dl_observers (node_id) "
               "WHERE node_id IS NOT NULL")


def downgrade() -> None:
    op.execute("DROP TABLE IF EXISTS dl_observers")
    op.execute("DROP TABLE IF EXISTS dl_nodes")
