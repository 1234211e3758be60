"""The claim fence (issue 35): a pause waits for the claims in flight, and a claim that comes after
a pause sees it.

Why: every claim reads the queue's pause in its statement's snapshot. A claim whose snapshot was
taken before a pause committed could still commit its starts after the pause had returned: a plain
or fair claim by simply committing later, and a limited claim by waiting for the flow row behind
the pause and then starting, with its old snapshot's "not paused" (tests/flow/test_pause_in_flight.py
drove both). Promise 12 says paused means nothing new starts: after `pause_queue` returns, nothing.

What: `dl_claim_fence(queue)`, which every claim statement calls once, before its walk. It takes
the queue's claim fence, a transaction-level advisory lock in the two-int4 space
(FENCE_CLASS, hashtext(queue)), in SHARE mode, and then, in a fresh snapshot (a VOLATILE plpgsql
function: each query sees what committed before it ran, so after the lock), reads the queue's
pause: NULL when the queue is paused, else its paused tasks (an array, empty when none). A pause
(of the queue, or of one of its tasks: flow/pause_queue.sql, flow/pause_task.sql) takes the same
lock EXCLUSIVELY in its own statement before it writes. So:
- a claim that holds the fence when the pause asks for it: the pause waits for that claim's
  commit, so its starts commit before the pause returns;
- a claim that asks for the fence after the pause did waits behind it (PostgreSQL queues a shared
  request behind a waiting exclusive one) and reads the pause after it committed: nothing starts.
The lock is shared among claims (they never wait for each other on it) and held by a claim only for
its own statement's transaction (the claims run in autocommit). Claims take it before any row
lock, and a pause before its row write, so no cycle with the flow gate's row locks.

Revision ID: 0029_claim_fence
Revises: 0028_console_sessions
"""

from alembic import op

revision = "0029_claim_fence"
down_revision = "0028_console_sessions"
branch_labels = None
depends_on = None

# 'DLFP' (dataloader flow pause): the class of the claim fence's two-int4 advisory lock; the
# pause statements use the same number (flow/pause_queue.sql, flow/pause_task.sql)
FENCE_CLASS = 0x444C4650

FENCE = rf"""
CREATE OR REPLACE FUNCTION dl_claim_fence(p_queue text)
RETURNS text[] LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    PERFORM pg_advisory_xact_lock_shared({FENCE_CLASS}, hashtext(p_queue));
    -- after the lock: a fresh snapshot, which sees a pause that committed while this waited
    -- (one query, not two: each is a round of the executor, and this runs once per claim)
    RETURN CASE WHEN EXISTS (SELECT 1 FROM dl_queue_flow WHERE queue = p_queue AND paused) THEN NULL
                ELSE ARRAY(SELECT task FROM dl_task_flow WHERE queue = p_queue AND paused) END;
END
$$
"""


def upgrade() -> None:
    op.execute(FENCE)


def downgrade() -> None:
    op.execute("DROP FUNCTION IF EXISTS dl_claim_fence(text)")
