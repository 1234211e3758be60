"""Flow control: the claim's gate for a queue's limits (0022), and the record of starts
that rate limits count.

Why: a global limit must hold across every node at every moment, through kills and restarts, so
it is decided by the database inside the claim statement, never by a node's memory. Two claims of
one limited queue on two nodes must not both see "one slot left": they serialise on the queue's
`dl_queue_flow` row. But a statement's snapshot is taken when it starts, so a claim that waited
for that lock would still count the running jobs as they were before the other node's claim
committed, and overshoot. `dl_flow_gate` is a VOLATILE plpgsql function: each query in it takes a
fresh snapshot (READ COMMITTED), so it counts after it holds the lock, and sees every claim that
committed before it got it.

What:
- `dl_flow_starts (queue, partition_key, job_id, started_at)`: one row per job start of a queue
  with a rate limit (per queue or per partition key), stamped with the gate's clock after the
  lock, so "at most N starts in any window of the period" is a count of rows, the same for every
  node, after a restart or a node's death (no burst: the rows are in the database). Rows older
  than the longest period, and at least a minute, are deleted by the gate itself (the last minute
  of starts stays readable: an operator's or a test's record of what started when); a count reads
  only its window's rows (an index range), at most N per period.
- `dl_flow_gate(queue, job_ids, partition_keys)`: called by claim_limited_jobs.sql only for a queue that
  has a limit (an unlimited queue never calls it, never takes the lock). It locks the queue's flow
  row (FOR UPDATE: held to the claim's commit, so the next claim of the queue counts this one's
  jobs as running), counts running jobs (queue, and per partition key of the candidates) and starts
  in each window, and returns one verdict per candidate in claim order: NULL (may start) or the
  limit that holds it back ('concurrency', 'rate', 'partition_concurrency', 'partition_rate'). It
  records the starts it allowed. A NULL partition key in the input is a candidate that will not
  ask (a later job of a lock_key already in the batch): no verdict, nothing counted.
  A candidate allowed here whose lock_key is then taken by another session at that instant counts
  as a start without starting: the gate errs on the side of fewer starts, never more.

Revision ID: 0023_flow_gate
Revises: 0022_queue_limits
"""

from alembic import op

revision = "0023_flow_gate"
down_revision = "0022_queue_limits"
branch_labels = None
depends_on = None

GATE = r"""
CREATE OR REPLACE FUNCTION dl_flow_gate(p_queue text, p_job_ids uuid[], p_partitions text[])
RETURNS text[] LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    f record;  -- not %ROWTYPE: a column added to dl_queue_flow later must not stale a compiled gate
    t timestamptz;
    n int := COALESCE(array_length(p_partitions, 1), 0);
    verdicts text[] := array_fill(NULL::text, ARRAY[n]);
    conc_left bigint;
    rate_left bigint;
    p_running jsonb := '{}';
    p_starts jsonb := '{}';
    started_ids uuid[] := '{}';
    started_keys text[] := '{}';
    k text;
    pr bigint;
    ps bigint;
BEGIN
    SELECT * INTO f FROM dl_queue_flow WHERE queue = p_queue FOR UPDATE;
    IF NOT FOUND OR (f.concurrency IS NULL AND f.partition_concurrency IS NULL AND f.rate_limit IS NULL
                     AND f.partition_rate_limit IS NULL) THEN
        RETURN NULL;  -- the limits were cleared since the claim's snapshot: nothing holds back
    END IF;
    -- After the lock: every query below sees the claims that committed while this one waited.
    t := clock_timestamp();
    IF f.concurrency IS NOT NULL THEN
        SELECT f.concurrency - count(*) INTO conc_left
        FROM dl_jobs WHERE queue = p_queue AND status = 'running';
    END IF;
    IF f.rate_limit IS NOT NULL THEN
        SELECT f.rate_limit - count(*) INTO rate_left
        FROM dl_flow_starts
        WHERE queue = p_queue AND started_at > t - make_interval(secs => f.rate_period_sec) AND started_at <= t;
    END IF;
    IF f.partition_concurrency IS NOT NULL THEN
        SELECT COALESCE(jsonb_object_agg(s.partition_key, s.c), '{}') INTO p_running
        FROM (SELECT partition_key, count(*) AS c FROM dl_jobs
              WHERE queue = p_queue AND status = 'running' AND partition_key = ANY (p_partitions)
              GROUP BY partition_key) s;
    END IF;
    IF f.partition_rate_limit IS NOT NULL THEN
        SELECT COALESCE(jsonb_object_agg(s.partition_key, s.c), '{}') INTO p_starts
        FROM (SELECT partition_key, count(*) AS c FROM dl_flow_starts
              WHERE queue = p_queue AND partition_key = ANY (p_partitions)
                AND started_at > t - make_interval(secs => f.partition_rate_period_sec) AND started_at <= t
              GROUP BY partition_key) s;
    END IF;
    FOR i IN 1 .. n LOOP
        k := p_partitions[i];
        CONTINUE WHEN k IS NULL;
        pr := COALESCE((p_running ->> k)::bigint, 0);
        ps := COALESCE((p_starts ->> k)::bigint, 0);
        IF conc_left <= 0 THEN
            verdicts[i] := 'concurrency';
        ELSIF rate_left <= 0 THEN
            verdicts[i] := 'rate';
        ELSIF pr >= f.partition_concurrency THEN
            verdicts[i] := 'partition_concurrency';
        ELSIF ps >= f.partition_rate_limit THEN
            verdicts[i] := 'partition_rate';
        ELSE
            conc_left := conc_left - 1;
            rate_left := rate_left - 1;
            p_running := jsonb_set(p_running, ARRAY[k], to_jsonb(pr + 1));
            p_starts := jsonb_set(p_starts, ARRAY[k], to_jsonb(ps + 1));
            started_ids := started_ids || p_job_ids[i];
            started_keys := started_keys || k;
        END IF;
    END LOOP;
    IF f.rate_limit IS NOT NULL OR f.partition_rate_limit IS NOT NULL THEN
        INSERT INTO dl_flow_starts (queue, partition_key, job_id, started_at)
        SELECT p_queue, s.k, s.id, t FROM unnest(started_keys, started_ids) AS s(k, id);
        DELETE FROM dl_flow_starts
        WHERE queue = p_queue
          AND started_at <= t - make_interval(secs => GREATEST(60, f.rate_period_sec, f.partition_rate_period_sec));
    END IF;
    RETURN verdicts;
END
$$
"""


def upgrade() -> None:
    op.execute(
        "CREATE TABLE IF NOT EXISTS dl_flow_starts ("
        " queue text NOT NULL,"
        " partition_key text NOT NULL,"
        " job_id uuid NOT NULL,"
        " started_at timestamptz NOT NULL)"
    )
    op.execute("CREATE INDEX IF NOT EXISTS ix_dl_flow_starts_queue ON dl_flow_starts (queue, started_at)")
    op.execute("CREATE INDEX IF NOT EXISTS ix_dl_flow_starts_partition "
               "ON dl_flow_starts (queue, partition_key, started_at)")
    op.execute(GATE)


def downgrade() -> None:
    op.execute("DROP FUNCTION IF EXISTS dl_flow_gate(text, uuid[], text[])")
    op.execute("DROP TABLE IF EXISTS dl_flow_starts")
