"""Flow control: a queue's limits across every node, beside its pause.

Why: global concurrency (at most N jobs of a queue running on all nodes, and at most N per
partition_key) and rate limits (at most N starts per period, per queue and per partition_key) are
one queue's settings, changed at run time by an operator or declared in code, and read by every
claim of the queue. They belong on the queue's flow row (0019), which the claim already reads once
per statement: a queue with no row, or a row with no limit, costs the claim nothing more.

What: nullable columns on `dl_queue_flow` (NULL: no limit), each CHECKed to the range the faces
accept (model/flow.py LIMIT_RULES), so a hand-written row cannot hold a limit no face could set;
`settings_source` says who set them last ('runtime' wins over 'declared' at a node's start).

Revision ID: 0022_queue_limits
Revises: 0021_job_attempt_span
"""

from alembic import op

revision = "0022_queue_limits"
down_revision = "0021_job_attempt_span"
branch_labels = None
depends_on = None

COLUMNS = (
    "concurrency integer CHECK (concurrency BETWEEN 1 AND 1000000)",
    "partition_concurrency integer CHECK (partition_concurrency BETWEEN 1 AND 1000000)",
    "rate_limit integer CHECK (rate_limit BETWEEN 1 AND 100000)",
    "rate_period_sec double precision CHECK (rate_period_sec BETWEEN 0.01 AND 86400)",
    "partition_rate_limit integer CHECK (partition_rate_limit BETWEEN 1 AND 100000)",
    "partition_rate_period_sec double precision CHECK (partition_rate_period_sec BETWEEN 0.01 AND 86400)",
    "settings_source text CHECK (settings_source IN ('declared', 'runtime'))",
)


def upgrade() -> None:
    op.execute("ALTER TABLE dl_queue_flow " + ", ".join(f"ADD COLUMN IF NOT EXISTS {c}" for c in COLUMNS))
    # A rate is counted over its period: a row with one and not the other would be ambiguous.
    op.execute("ALTER TABLE dl_queue_flow ADD CONSTRAINT dl_queue_flow_rate_period "
               "CHECK ((rate_limit IS NULL) = (rate_period_sec IS NULL))")
    op.execute("ALTER TABLE dl_queue_flow ADD CONSTRAINT dl_queue_flow_partition_rate_period "
               "CHECK ((partition_rate_limit IS NULL) = (partition_rate_period_sec IS NULL))")


def downgrade() -> None:
    op.execute("ALTER TABLE dl_queue_flow DROP CONSTRAINT IF EXISTS dl_queue_flow_rate_period, "
               "DROP CONSTRAINT IF EXISTS dl_queue_flow_partition_rate_period, "
               + ", ".join(f"DROP COLUMN IF EXISTS {c.split()[0]}" for c in COLUMNS))
