"""Pause one task of a queue: `dl_task_flow (queue, task, paused, paused_at,
updated_at)`.

Why: an operator stops one kind of work (a task whose downstream is down) without stopping the
other tasks of its queue; as with a queue's pause (0019) the state must be durable and hold on
every node, so it is a row, read by the claim statements themselves.

What: one row per (queue, task) that was ever paused; no row means "not paused", so a database
where no task was ever paused has an empty table and the claim pays one probe of its primary key
(an uncorrelated InitPlan: the array of the queue's paused tasks, evaluated once per claim; each
candidate is then compared with an empty array). dl_jobs is not touched (the 003 DDL is a contract).

Revision ID: 0025_task_pause
Revises: 0024_fair_share
"""

from alembic import op

revision = "0025_task_pause"
down_revision = "0024_fair_share"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(
        "CREATE TABLE IF NOT EXISTS dl_task_flow ("
        " queue text NOT NULL CHECK (length(queue) BETWEEN 1 AND 200),"
        " task text NOT NULL CHECK (length(task) BETWEEN 1 AND 200),"
        " paused boolean NOT NULL DEFAULT false,"
        " paused_at timestamptz,"
        " updated_at timestamptz NOT NULL DEFAULT now(),"
        " PRIMARY KEY (queue, task))"
    )


def downgrade() -> None:
    op.execute("DROP TABLE IF EXISTS dl_task_flow")
