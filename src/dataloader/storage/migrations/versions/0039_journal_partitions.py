"""The journal `dl_job_events` partitioned by RANGE (ts), so old history goes by DROP TABLE of a
whole partition (retention/partitions.py) instead of a DELETE per row (issue 39).

What changes, and the one change to the 003 DDL's constraints: the columns, their types, defaults
and NOT NULLs stay; the primary key becomes (ts, event_id), because PostgreSQL requires every
unique constraint of a partitioned table to hold the partition key. ts comes first so that the
one index ordered by event_id is ix_dl_job_events_job (job_id, event_id): with (event_id, ts), on
a young partition the planner walked the key backward with job_id as a mere filter for the
"last picked row of this job" lookups (running_picked_by.sql, stats/rollup.sql; found by
tests/storage/test_plan_stability.py), a walk as long as the partition. event_id still comes from the
same sequence (`dl_job_events_event_id_seq`, now owned by the partitioned table), so it is still
unique in practice and still orders a job's history; no statement of the engine relies on its
uniqueness (no ON CONFLICT on the journal, lookups are by job_id then event_id through
ix_dl_job_events_job). The foreign key to dl_jobs with ON DELETE CASCADE stays (a partitioned
table may reference a plain one).

How the existing rows are kept: the old table is renamed `dl_job_events_p_legacy` and attached as
the partition FROM (MINVALUE) TO (the next UTC midnight after now); no row is copied. A row with a
ts at or past that bound (a hand-written future or 'infinity' ts) is moved into the DEFAULT
partition first. The DEFAULT partition takes every row no range covers, so an insert is never
refused, whatever its ts (promise 9) and whether or not the partition duty has run.

On a large journal this migration, under its lock on the journal (inserts wait; it runs at start
like every migration, docs/deploy.md), reads the table twice (the stray-row move and ATTACH's bound
check) and builds one index, the new unique (ts, event_id). It writes no row but the strays. To make
it catalog-only on a big table, build that index beforehand without blocking:
`CREATE UNIQUE INDEX CONCURRENTLY dl_job_events_p_legacy_event_ts ON dl_job_events (ts, event_id)`;
the migration reuses an index of that name.

The two functions create and drop a partition by name (identifiers cannot be statement
parameters); the rules of which partition and which rows survive are in
queries/retention/journal_*.sql.

Downgrade: back to the plain 0001 table, by copying every row into it (the only way from a
partitioned table back to a plain one), then the old indexes and ownership.

Revision ID: 0039_journal_partitions
Revises: 0038_workflow_operations
"""

from alembic import op

revision = "0039_journal_partitions"
down_revision = "0038_workflow_operations"
branch_labels = None
depends_on = None

LEGACY = "dl_job_events_p_legacy"

ATTACH_FUNCTION = r"""
CREATE OR REPLACE FUNCTION dl_journal_attach_partition(p_name text, p_from timestamptz, p_to timestamptz)
RETURNS boolean AS $$
-- A new range partition, made as a plain table and then attached: ATTACH takes SHARE UPDATE
-- EXCLUSIVE on the journal (inserts go on) where CREATE ... PARTITION OF takes ACCESS EXCLUSIVE.
-- The table is empty, so the bound check and the foreign key's validation read nothing; the
-- DEFAULT partition is read for rows of the range (none: the range is ahead). False: it exists.
BEGIN
  IF to_regclass(p_name) IS NOT NULL THEN
    RETURN false;
  END IF;
  EXECUTE format('CREATE TABLE %I (LIKE dl_job_events INCLUDING DEFAULTS)', p_name);
  EXECUTE format('ALTER TABLE dl_job_events ATTACH PARTITION %I FOR VALUES FROM (%L) TO (%L)',
                 p_name, p_from, p_to);
  RETURN true;
END $$ LANGUAGE plpgsql
"""

DROP_FUNCTION = r"""
CREATE OR REPLACE FUNCTION dl_journal_drop_partition(p_name text) RETURNS bigint AS $$
-- Drop one range partition and put back the rows staged in the temporary table
-- dl_journal_survivors (retention/journal_stage_survivors.sql, same transaction): with the range
-- gone they land in the DEFAULT partition, with their own ts and event_id. Only rows whose job
-- still exists go back (a job the pruner deleted meanwhile lost them by cascade). Returns how
-- many rows were kept.
DECLARE
  kept bigint;
BEGIN
  IF NOT EXISTS (SELECT 1 FROM pg_inherits i WHERE i.inhrelid = to_regclass(p_name)
                 AND i.inhparent = 'dl_job_events'::regclass) THEN
    RAISE EXCEPTION 'not a partition of dl_job_events: %', p_name;
  END IF;
  EXECUTE format('DROP TABLE %I', p_name);
  INSERT INTO dl_job_events (event_id, job_id, queue, ts, kind, payload)
  SELECT s.event_id, s.job_id, s.queue, s.ts, s.kind, s.payload
  FROM dl_journal_survivors s
  WHERE EXISTS (SELECT 1 FROM dl_jobs j WHERE j.job_id = s.job_id);
  GET DIAGNOSTICS kept = ROW_COUNT;
  RETURN kept;
END $$ LANGUAGE plpgsql
"""


def upgrade() -> None:
    op.execute("LOCK TABLE dl_job_events IN ACCESS EXCLUSIVE MODE")
    op.execute(f"ALTER TABLE dl_job_events RENAME TO {LEGACY}")
    op.execute(f"ALTER INDEX IF EXISTS ix_dl_job_events_job RENAME TO {LEGACY}_job")
    # the new primary key's index on the old rows (reused when built beforehand, see above)
    op.execute(f"CREATE UNIQUE INDEX IF NOT EXISTS {LEGACY}_event_ts ON {LEGACY} (ts, event_id)")
    op.execute(f"ALTER TABLE {LEGACY} DROP CONSTRAINT dl_job_events_pkey")
    op.execute(f"ALTER TABLE {LEGACY} ADD CONSTRAINT {LEGACY}_pkey PRIMARY KEY USING INDEX {LEGACY}_event_ts")
    # an index of the engine's (0002) on a hand-applied schema that skipped it: ATTACH needs one
    op.execute(f"CREATE INDEX IF NOT EXISTS {LEGACY}_job ON {LEGACY} (job_id, event_id)")
    op.execute("""
        CREATE TABLE dl_job_events (
          event_id bigint NOT NULL DEFAULT nextval('dl_job_events_event_id_seq'::regclass),
          job_id uuid NOT NULL,
          queue text NOT NULL,
          ts timestamptz NOT NULL DEFAULT now(),
          kind text NOT NULL,
          payload jsonb,
          CONSTRAINT dl_job_events_pkey PRIMARY KEY (ts, event_id),
          CONSTRAINT dl_job_events_job_id_fkey FOREIGN KEY (job_id) REFERENCES dl_jobs(job_id) ON DELETE CASCADE
        ) PARTITION BY RANGE (ts)
    """)
    op.execute("CREATE INDEX ix_dl_job_events_job ON dl_job_events (job_id, event_id)")
    op.execute("ALTER SEQUENCE dl_job_events_event_id_seq OWNED BY dl_job_events.event_id")
    op.execute("CREATE TABLE dl_job_events_default PARTITION OF dl_job_events DEFAULT")
    op.execute(r"""
        DO $$
        DECLARE
          cutover timestamptz := (date_trunc('day', now() AT TIME ZONE 'UTC') + interval '1 day') AT TIME ZONE 'UTC';
        BEGIN
          -- rows past the bound (none unless a ts was written by hand) keep their place in the default
          WITH stray AS (DELETE FROM dl_job_events_p_legacy WHERE ts >= cutover RETURNING *)
          INSERT INTO dl_job_events_default SELECT * FROM stray;
          EXECUTE format('ALTER TABLE dl_job_events ATTACH PARTITION dl_job_events_p_legacy '
                         'FOR VALUES FROM (MINVALUE) TO (%L)', cutover);
        END $$
    """)
    op.execute(ATTACH_FUNCTION)
    op.execute(DROP_FUNCTION)


def downgrade() -> None:
    op.execute("LOCK TABLE dl_job_events IN ACCESS EXCLUSIVE MODE")
    op.execute("ALTER TABLE dl_job_events RENAME TO dl_job_events_partitioned")
    op.execute("ALTER INDEX ix_dl_job_events_job RENAME TO ix_dl_job_events_partitioned_job")
    op.execute("ALTER TABLE dl_job_events_partitioned RENAME CONSTRAINT dl_job_events_pkey "
               "TO dl_job_events_partitioned_pkey")
    op.execute("""
        CREATE TABLE dl_job_events (
          event_id bigint NOT NULL DEFAULT nextval('dl_job_events_event_id_seq'::regclass) PRIMARY KEY,
          job_id uuid NOT NULL REFERENCES dl_jobs(job_id) ON DELETE CASCADE,
          queue text NOT NULL,
          ts timestamptz NOT NULL DEFAULT now(),
          kind text NOT NULL,
          payload jsonb
        )
    """)
    op.execute("INSERT INTO dl_job_events SELECT event_id, job_id, queue, ts, kind, payload "
               "FROM dl_job_events_partitioned")
    op.execute("ALTER SEQUENCE dl_job_events_event_id_seq OWNED BY dl_job_events.event_id")
    op.execute("DROP TABLE dl_job_events_partitioned")
    op.execute("CREATE INDEX ix_dl_job_events_job ON dl_job_events (job_id, event_id)")
    op.execute("DROP FUNCTION IF EXISTS dl_journal_attach_partition(text, timestamptz, timestamptz)")
    op.execute("DROP FUNCTION IF EXISTS dl_journal_drop_partition(text)")
