-- Record one position of a run's history and its journal row, in one statement, fenced: nothing
-- is written unless the run's job is still running with this attempt (FOR SHARE: the reaper cannot
-- take it back before this commits). A position already done or failed is never overwritten (the
-- first record wins); a pending one (a step between retries, a wait) is completed here, and only by
-- the same kind and name.
-- $1 run id, $2 attempt, $3 seq, $4 kind, $5 name, $6 state ('pending'|'done'|'failed'),
-- $7 result (JSON text or NULL), $8 error, $9 attempts, $10 seconds from now to wake_at (NULL: none),
-- $11 remaining (a gather's join counter; NULL otherwise), $12 fail_fast (a gather's; false otherwise),
-- $13 the position's step job (a pending step that runs as a job of its own; NULL otherwise: set
-- only by the insert, never changed by a later record).
-- Returns `live` (false: fenced off, nothing written), the seconds the lease has left by the
-- database's clock (as step_may_start.sql) and the stored row when this wrote it.
WITH live AS (
    SELECT job_id, queue, EXTRACT(epoch FROM lease_expires_at - now())::float8 AS lease_left_sec FROM dl_jobs
    WHERE job_id = $1 AND status::text = 'running' AND attempt = $2
    FOR SHARE
), rec AS (
    INSERT INTO dl_workflow_steps AS s (run_id, seq, kind, name, state, result, error, attempts, wake_at,
                                        remaining, fail_fast, finished_at, job_id)
    SELECT $1, $3, $4, $5, $6, $7::text::jsonb, $8, $9,
           now() + make_interval(secs => $10::float8), $11, $12, CASE WHEN $6 <> 'pending' THEN now() END, $13::uuid
    FROM live
    ON CONFLICT (run_id, seq) DO UPDATE
    SET state = EXCLUDED.state, result = EXCLUDED.result, error = EXCLUDED.error,
        attempts = EXCLUDED.attempts, wake_at = EXCLUDED.wake_at, finished_at = EXCLUDED.finished_at
    WHERE s.state = 'pending' AND s.kind = EXCLUDED.kind AND s.name = EXCLUDED.name
    RETURNING s.seq, s.kind, s.name, s.state, s.result::text AS result, s.error, s.attempts, s.wake_at, s.remaining,
              s.job_id
), journal AS (
    INSERT INTO dl_job_events (job_id, queue, kind, payload)
    SELECT live.job_id, live.queue, 'workflow_' || rec.kind,
-- @include workflows/step_journal_payload
    FROM live, rec
)
SELECT EXISTS (SELECT 1 FROM live) AS live, (SELECT lease_left_sec FROM live) AS lease_left_sec, rec.*
FROM (SELECT 1) AS one LEFT JOIN rec ON true
