"""Fair share across partition keys: a queue can be configured so its claims go
round-robin (or by weight) across the jobs' `partition_key`s instead of strictly by age.

Why: under one hot tenant (100,000 queued jobs of one partition_key) every other tenant's first job
waits for the whole hot backlog, since the claim walks ix_dl_jobs_claim_order by priority and age.

What:
- `dl_queue_flow.fair_share boolean NOT NULL DEFAULT false` and `fair_weights jsonb` (partition_key
  -> weight; a key not named weighs 1): the queue's choice, on the row the pause already uses, so
  the default claim's one probe of that row (claim_jobs.sql) leaves a fair queue to the fair claim
  (claim_jobs_fair.sql) at no extra cost.
- `dl_queue_partitions (queue, partition_key, served_at)`: when each tenant of a fair queue last had
  a job claimed. The fair claim serves the least recently served tenants first (round-robin that
  holds across nodes and restarts) and stamps the ones it served. Written only by fair claims.
- `ix_dl_jobs_fair (queue, partition_key, priority, available_at, created_at) WHERE queued and not
  parked`: the fair claim's skip scan over a queue's distinct partition keys and each tenant's
  head in (priority, available_at, created_at) order. Its only cost for a queue that is not fair
  is one index entry per enqueued job (the claim's UPDATE makes the row `running`, which the
  predicate leaves out); measured in bench/README.md ("fair share").

dl_jobs gains no column (the 003 DDL is a contract; additions only).

Revision ID: 0024_fair_share
Revises: 0023_flow_gate
"""

from alembic import op

revision = "0024_fair_share"
down_revision = "0023_flow_gate"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute("ALTER TABLE dl_queue_flow ADD COLUMN IF NOT EXISTS fair_share boolean NOT NULL DEFAULT false")
    op.execute("ALTER TABLE dl_queue_flow ADD COLUMN IF NOT EXISTS fair_weights jsonb")
    op.execute(
        "CREATE TABLE IF NOT EXISTS dl_queue_partitions ("
        " queue text NOT NULL,"
        " partition_key text NOT NULL,"
        " served_at timestamptz NOT NULL DEFAULT now(),"
        " PRIMARY KEY (queue, partition_key))"
    )
    op.execute(
        "CREATE INDEX IF NOT EXISTS ix_dl_jobs_fair ON dl_jobs(queue, partition_key, priority, available_at, "
        "created_at) WHERE status = 'queued' AND NOT key_parked"
    )


def downgrade() -> None:
    op.execute("DROP INDEX IF EXISTS ix_dl_jobs_fair")
    op.execute("DROP TABLE IF EXISTS dl_queue_partitions")
    op.execute("ALTER TABLE dl_queue_flow DROP COLUMN IF EXISTS fair_weights")
    op.execute("ALTER TABLE dl_queue_flow DROP COLUMN IF EXISTS fair_share")
