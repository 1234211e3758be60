"""Samples of the queue's own tables, for a steady state you can see (docs/observability.md
"Storage"): the leader's storage sampler (health/storage.py) writes one row per table we own every
DL_STORAGE_SAMPLE_SEC — heap, index and TOAST bytes, live and dead tuples, the last autovacuum and
autoanalyze — and keeps them DL_STORAGE_SAMPLE_KEEP. /metrics on every node reads the newest
sample (one index probe) instead of walking the catalog and the files at each scrape, and the
console draws the trend from the older ones.

Keyed (sampled_at, table_name): the newest sample is a backward scan of the key's first column,
a trend a range of it, and the prune of old samples a range from its head.

Revision ID: 0040_storage_samples
Revises: 0038_workflow_operations
"""

from alembic import op

revision = "0040_storage_samples"
down_revision = "0039_journal_partitions"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute("""
        CREATE TABLE IF NOT EXISTS dl_storage_samples (
          sampled_at timestamptz NOT NULL,
          table_name text NOT NULL,
          heap_bytes bigint NOT NULL,
          index_bytes bigint NOT NULL,
          toast_bytes bigint NOT NULL,
          live_tuples bigint NOT NULL,
          dead_tuples bigint NOT NULL,
          last_autovacuum timestamptz,
          last_autoanalyze timestamptz,
          PRIMARY KEY (sampled_at, table_name)
        )
    """)


def downgrade() -> None:
    op.execute("DROP TABLE IF EXISTS dl_storage_samples")
