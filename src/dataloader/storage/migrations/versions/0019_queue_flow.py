"""Flow control, first slice: a queue can be paused, durably, for every node.

Why: an operator stops a queue from starting new work (a downstream outage, a deploy) without
stopping the nodes or losing what is queued: jobs already running finish, enqueue keeps working,
and a resume starts the backlog. The state must survive restarts and hold on every node, so it
lives in the database, not in a node's memory.

What: `dl_queue_flow`, one row per queue that has flow-control state (queue text primary key,
paused, when and by whom it changed). No row means "not paused": a database where nobody ever
paused a queue has an empty table. The claim (claim_jobs.sql) and next_due_in.sql leave a paused
queue out with one uncorrelated `NOT EXISTS` probe of this table's primary key per statement (an
InitPlan, not a probe per candidate), so the pause holds from its commit on, on every node, with
no per-node cache to go stale. dl_jobs is not touched (the 003 DDL is a contract).

Revision ID: 0019_queue_flow
Revises: 0018_job_request_id
"""

from alembic import op

revision = "0019_queue_flow"
down_revision = "0018_job_request_id"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(
        "CREATE TABLE IF NOT EXISTS dl_queue_flow ("
        " queue text PRIMARY KEY CHECK (length(queue) BETWEEN 1 AND 200),"
        " paused boolean NOT NULL DEFAULT false,"
        " paused_at timestamptz,"
        " updated_at timestamptz NOT NULL DEFAULT now())"
    )


def downgrade() -> None:
    op.execute("DROP TABLE IF EXISTS dl_queue_flow")
