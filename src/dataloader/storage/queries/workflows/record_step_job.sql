-- A step job records the result of its step on its run's history, in one statement, fenced on the
-- STEP JOB (running with this attempt, FOR SHARE: the reaper cannot take it back before this
-- commits), not on the run, which is suspended meanwhile. Only the position whose step job this is,
-- and only while it is pending: the first record wins (a step job retried after its record writes
-- nothing; a run that recorded the step failed after its job ended keeps that). The journal row is
-- the run's, as any record of its history (`workflow_step`, with the step job's id).
-- $1 step job id, $2 its attempt, $3 run id, $4 seq, $5 state ('pending'|'done'|'failed'),
-- $6 result (JSON text or NULL), $7 error, $8 attempts, $9 seconds from now to wake_at (NULL: none).
-- Returns `live` (false: fenced off, nothing written), the seconds the step job's lease has left and
-- the stored row when this wrote it.
WITH live AS (
    SELECT job_id, EXTRACT(epoch FROM lease_expires_at - now())::float8 AS lease_left_sec FROM dl_jobs
    WHERE job_id = $1 AND status::text = 'running' AND attempt = $2
    FOR SHARE
), rec AS (
    UPDATE dl_workflow_steps s
    SET state = $5, result = $6::text::jsonb, error = $7, attempts = $8,
        wake_at = now() + make_interval(secs => $9::float8), finished_at = CASE WHEN $5 <> 'pending' THEN now() END
    FROM live
    WHERE s.run_id = $3 AND s.seq = $4 AND s.job_id = live.job_id AND s.state = 'pending'
    RETURNING s.seq, s.kind, s.name, s.state, s.result::text AS result, s.error, s.attempts, s.wake_at, s.remaining,
              s.job_id
), journal AS (
    INSERT INTO dl_job_events (job_id, queue, kind, payload)
    SELECT run.job_id, run.queue, 'workflow_' || rec.kind,
-- @include workflows/step_journal_payload
    FROM rec, dl_jobs run WHERE run.job_id = $3
)
SELECT EXISTS (SELECT 1 FROM live) AS live, (SELECT lease_left_sec FROM live) AS lease_left_sec, rec.*
FROM (SELECT 1) AS one LEFT JOIN rec ON true
