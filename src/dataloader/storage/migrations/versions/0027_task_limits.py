"""Flow control: limits per TASK of a queue, across every node — `@pipeline("x",
limits={...})`, `App.configure_task`, PATCH /api/v1/queues/{queue}/tasks/{task}, `dataloader queues
set QUEUE --task TASK`.

Why: one kind of work (a task calling a fragile API) must not run more than N at once, or start
more than N per period, whatever queue shares it with other tasks and however many nodes claim. As
with a queue's limits (0022/0023) the decision is the database's, inside the claim, never a node's
memory, so it holds through kills and restarts.

What:
- `dl_task_flow` (0025, one row per (queue, task) with flow state) gets the task's limits:
  `concurrency` (running jobs of the task in the queue), `rate_limit` starts per `rate_period_sec`,
  and `settings_source` ('runtime' wins over 'declared', as for a queue).
- `dl_queue_flow.task_limited`: true while any task of the queue has a limit, written in the same
  transaction as the task's limits. The claim statements read the queue's row anyway, so the plain
  claim (claim_jobs.sql) leaves such a queue to claim_limited_jobs.sql with the same probe it
  already makes (no new read on the unlimited path), and next_due_in.sql tells the worker.
- `dl_task_starts (queue, task, job_id, started_at)`: one row per start of a task with a rate
  limit, stamped by the gate's clock after its lock: "at most N starts in any window" is a count of
  rows, the same on every node and after a restart (no burst). Kept apart from dl_flow_starts,
  whose rows the queue's own rate counts.
- `dl_flow_gate(queue, job_ids, partition_keys, tasks, queue_limited)`, which this release's claims
  call (0023's three-argument gate stays for a node of the previous release): besides the queue's row (locked only when the queue has limits of its own; at once when the
  claim's snapshot says so) it locks the rows of the
  candidates' limited tasks, in task order (every claim, and every change of a task's limits, which
  locks the queue's row first, takes them in that order: no deadlock), then counts each task's
  running jobs and starts in a fresh snapshot. Verdicts 'task_concurrency' and 'task_rate' join the
  queue's. So claims of a limited task take turns on its row; a queue with only task limits does
  not serialise its other tasks' claims.

Revision ID: 0027_task_limits
Revises: 0026_held_jobs_index
"""

import importlib

from alembic import op

revision = "0027_task_limits"
down_revision = "0026_held_jobs_index"
branch_labels = None
depends_on = None

GATE = r"""
CREATE OR REPLACE FUNCTION dl_flow_gate(p_queue text, p_job_ids uuid[], p_partitions text[], p_tasks text[],
                                        p_queue_limited boolean)
RETURNS text[] LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    f record;  -- not %ROWTYPE: a column added to dl_queue_flow later must not stale a compiled gate
    tr record;
    t timestamptz;
    n int := COALESCE(array_length(p_partitions, 1), 0);
    verdicts text[] := array_fill(NULL::text, ARRAY[n]);
    queue_limited boolean;
    conc_left bigint;
    rate_left bigint;
    p_running jsonb := '{}';
    p_starts jsonb := '{}';
    -- per limited task among the candidates: slots and starts left (absent: no such limit)
    t_conc_left jsonb := '{}';
    t_rate_left jsonb := '{}';
    t_period jsonb := '{}';
    t_rated text[] := '{}';
    started_ids uuid[] := '{}';
    started_keys text[] := '{}';
    task_started_ids uuid[] := '{}';
    task_started_names text[] := '{}';
    k text;
    tk text;
    pr bigint;
    ps bigint;
    tc bigint;
    ts bigint;
BEGIN
    -- The queue's row is locked when it has limits of its own: at once when the claim's snapshot
    -- said so (one read, the common case), else after a read shows limits set since that snapshot.
    IF p_queue_limited THEN
        SELECT * INTO f FROM dl_queue_flow WHERE queue = p_queue FOR UPDATE;
    ELSE
        SELECT * INTO f FROM dl_queue_flow WHERE queue = p_queue;
    END IF;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    queue_limited := f.concurrency IS NOT NULL OR f.partition_concurrency IS NOT NULL OR f.rate_limit IS NOT NULL
                     OR f.partition_rate_limit IS NOT NULL;
    IF queue_limited AND NOT p_queue_limited THEN
        -- the lock, then the row as the last committed change left it
        SELECT * INTO f FROM dl_queue_flow WHERE queue = p_queue FOR UPDATE;
        queue_limited := f.concurrency IS NOT NULL OR f.partition_concurrency IS NOT NULL
                         OR f.rate_limit IS NOT NULL OR f.partition_rate_limit IS NOT NULL;
    END IF;
    IF f.task_limited THEN
        -- the candidates' limited tasks, locked in task order (LockRows sits above the sort)
        FOR tr IN SELECT tf.task, tf.concurrency, tf.rate_limit, tf.rate_period_sec FROM dl_task_flow tf
                  WHERE tf.queue = p_queue AND tf.task = ANY (p_tasks)
                    AND (tf.concurrency IS NOT NULL OR tf.rate_limit IS NOT NULL)
                  ORDER BY tf.task FOR UPDATE LOOP
            IF tr.concurrency IS NOT NULL THEN
                t_conc_left := t_conc_left || jsonb_build_object(tr.task, tr.concurrency);
            END IF;
            IF tr.rate_limit IS NOT NULL THEN
                t_rate_left := t_rate_left || jsonb_build_object(tr.task, tr.rate_limit);
                t_period := t_period || jsonb_build_object(tr.task, tr.rate_period_sec);
                t_rated := t_rated || tr.task;
            END IF;
        END LOOP;
    END IF;
    IF NOT queue_limited AND t_conc_left = '{}' AND t_rate_left = '{}' THEN
        RETURN NULL;  -- the limits were cleared since the claim's snapshot: nothing holds back
    END IF;
    -- After the locks: every query below sees the claims that committed while this one waited.
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
    IF t_conc_left <> '{}' THEN
        SELECT t_conc_left || COALESCE(jsonb_object_agg(s.task, (t_conc_left ->> s.task)::bigint - s.c), '{}')
        INTO t_conc_left
        FROM (SELECT task, count(*) AS c FROM dl_jobs
              WHERE queue = p_queue AND status = 'running'
                AND task = ANY (ARRAY(SELECT jsonb_object_keys(t_conc_left)))
              GROUP BY task) s;
    END IF;
    -- each rated task's starts in its window: one range of ix_dl_task_starts per task
    FOREACH tk IN ARRAY t_rated LOOP
        SELECT (t_rate_left ->> tk)::bigint - count(*) INTO ts
        FROM dl_task_starts
        WHERE queue = p_queue AND task = tk
          AND started_at > t - make_interval(secs => (t_period ->> tk)::float8) AND started_at <= t;
        t_rate_left := jsonb_set(t_rate_left, ARRAY[tk], to_jsonb(ts));
    END LOOP;
    FOR i IN 1 .. n LOOP
        k := p_partitions[i];
        CONTINUE WHEN k IS NULL;
        tk := p_tasks[i];
        pr := COALESCE((p_running ->> k)::bigint, 0);
        ps := COALESCE((p_starts ->> k)::bigint, 0);
        tc := (t_conc_left ->> tk)::bigint;
        ts := (t_rate_left ->> tk)::bigint;
        IF conc_left <= 0 THEN
            verdicts[i] := 'concurrency';
        ELSIF rate_left <= 0 THEN
            verdicts[i] := 'rate';
        ELSIF tc <= 0 THEN
            verdicts[i] := 'task_concurrency';
        ELSIF ts <= 0 THEN
            verdicts[i] := 'task_rate';
        ELSIF pr >= f.partition_concurrency THEN
            verdicts[i] := 'partition_concurrency';
        ELSIF ps >= f.partition_rate_limit THEN
            verdicts[i] := 'partition_rate';
        ELSE
            conc_left := conc_left - 1;
            rate_left := rate_left - 1;
            p_running := jsonb_set(p_running, ARRAY[k], to_jsonb(pr + 1));
            p_starts := jsonb_set(p_starts, ARRAY[k], to_jsonb(ps + 1));
            IF tc IS NOT NULL THEN
                t_conc_left := jsonb_set(t_conc_left, ARRAY[tk], to_jsonb(tc - 1));
            END IF;
            IF ts IS NOT NULL THEN
                t_rate_left := jsonb_set(t_rate_left, ARRAY[tk], to_jsonb(ts - 1));
                task_started_ids := task_started_ids || p_job_ids[i];
                task_started_names := task_started_names || tk;
            END IF;
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
    IF t_rated <> '{}' THEN
        INSERT INTO dl_task_starts (queue, task, job_id, started_at)
        SELECT p_queue, s.tk, s.id, t FROM unnest(task_started_names, task_started_ids) AS s(tk, id);
        -- the last minute (at least the period) of each rated task's starts stays readable
        FOREACH tk IN ARRAY t_rated LOOP
            DELETE FROM dl_task_starts
            WHERE queue = p_queue AND task = tk
              AND started_at <= t - make_interval(secs => GREATEST(60, (t_period ->> tk)::float8));
        END LOOP;
    END IF;
    RETURN verdicts;
END
$$
"""


def upgrade() -> None:
    # the ranges of a queue's limits (0022's checks), so no hand-written row breaks the gate
    op.execute("ALTER TABLE dl_task_flow"
               " ADD COLUMN IF NOT EXISTS concurrency integer CHECK (concurrency BETWEEN 1 AND 1000000),"
               " ADD COLUMN IF NOT EXISTS rate_limit integer CHECK (rate_limit BETWEEN 1 AND 100000),"
               " ADD COLUMN IF NOT EXISTS rate_period_sec double precision"
               " CHECK (rate_period_sec BETWEEN 0.01 AND 86400),"
               " ADD COLUMN IF NOT EXISTS settings_source text CHECK (settings_source IN ('declared', 'runtime')),"
               " ADD CONSTRAINT dl_task_flow_rate_period CHECK ((rate_limit IS NULL) = (rate_period_sec IS NULL))")
    op.execute("ALTER TABLE dl_queue_flow ADD COLUMN IF NOT EXISTS task_limited boolean NOT NULL DEFAULT false")
    op.execute(
        "CREATE TABLE IF NOT EXISTS dl_task_starts ("
        " queue text NOT NULL,"
        " task text NOT NULL,"
        " job_id uuid NOT NULL,"
        " started_at timestamptz NOT NULL)"
    )
    op.execute("CREATE INDEX IF NOT EXISTS ix_dl_task_starts ON dl_task_starts (queue, task, started_at)")
    op.execute(GATE)
    # 0023's three-argument gate stays: a node of the previous release still calls it during a
    # rolling upgrade, and keeps enforcing its queues' own limits (it knows no task limit)


def downgrade() -> None:
    # the three-argument gate of 0023, as that migration wrote it (kept by upgrade; rewritten in case)
    flow_gate = importlib.import_module("dataloader.storage.migrations.versions.0023_flow_gate")
    op.execute(flow_gate.GATE)
    op.execute("DROP FUNCTION IF EXISTS dl_flow_gate(text, uuid[], text[], text[], boolean)")
    op.execute("DROP TABLE IF EXISTS dl_task_starts")
    op.execute("ALTER TABLE dl_queue_flow DROP COLUMN IF EXISTS task_limited")
    op.execute("ALTER TABLE dl_task_flow DROP COLUMN IF EXISTS concurrency, DROP COLUMN IF EXISTS rate_limit,"
               " DROP COLUMN IF EXISTS rate_period_sec, DROP COLUMN IF EXISTS settings_source")
