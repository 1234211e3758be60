-- The flow gate and the take of a limited or fair claim (claim_limited_jobs.sql, claim_jobs_fair.sql),
-- after their `ranked` candidates (key_rank, pos) and `flow` row: dl_flow_gate's verdict per
-- candidate (0023; only for a limited queue), the free keys' advisory locks, the jobs marked running
-- (claim_mark_running.sql) and their 'picked' journal rows. Included as `gate AS MATERIALIZED (`
-- through the journal's last line; the claim closes the CTE. Parameters as the claims': $1 the queue,
-- $2 the worker (named in the journal row).
gate AS MATERIALIZED (
    -- Only for a limited queue (no flow row, or no limit: no row here, no call, no lock). The
    -- candidates in claim order; the ones that will not ask for their lock (key_rank > 1) as NULL.
    SELECT dl_flow_gate($1, ARRAY(SELECT r.job_id FROM ranked r ORDER BY r.pos),
                        ARRAY(SELECT CASE WHEN r.key_rank = 1 THEN r.partition_key END FROM ranked r ORDER BY r.pos),
                        ARRAY(SELECT r.task FROM ranked r ORDER BY r.pos), f.queue_limited
           ) AS verdicts
    FROM flow f
    WHERE f.limited AND EXISTS (SELECT 1 FROM ranked)
), verdict AS (
    SELECT r.*, ((SELECT g.verdicts FROM gate g))[r.pos] AS held
    FROM ranked r
), locked AS MATERIALIZED (
    SELECT r.job_id
    FROM verdict r
    -- dl_take_key (0044): the lock, then the running-key check again in a snapshot taken after it
    WHERE CASE WHEN r.key_rank = 1 AND r.held IS NULL THEN dl_take_key(r.lock_key) ELSE false END
), claimed AS (
-- @include claim_mark_running
), journal AS (
    -- ts: the moment after the gate (clock_timestamp(), not the statement's start, now()): a claim of a
    -- limited queue may have waited on the queue's flow row before the gate counted, and its 'picked'
    -- rows stamped with its start would put starts the gate allowed in one rate window into an earlier
    -- one. So the journal shows the starts as the gate counted them (docs/flow-control.md), and the
    -- chaos run checks every limit from it (tests/chaos/limits.py).
    INSERT INTO dl_job_events (job_id, queue, kind, payload, ts)
    SELECT c.job_id, r.queue, 'picked', jsonb_build_object('attempt', c.attempt, 'worker', $2::text, 'session', pg_backend_pid()),
           clock_timestamp()
    FROM claimed c JOIN verdict r USING (job_id)
