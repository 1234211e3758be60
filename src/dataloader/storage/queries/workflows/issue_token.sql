-- Make a run's wait token at history position $3, fenced like record_step.sql (nothing is made for
-- an attempt that no longer holds the run's job). A token already made for that position (an
-- attempt cut off before recording it) is kept: its secret is returned instead of $5.
-- $1 run id, $2 attempt, $3 seq, $4 name, $5 a fresh secret. Returns the position's token (NULL:
-- fenced off).
WITH live AS (
    SELECT job_id FROM dl_jobs
    WHERE job_id = $1 AND status::text = 'running' AND attempt = $2
    FOR SHARE
)
INSERT INTO dl_workflow_tokens AS t (token, run_id, seq, name)
SELECT $5, $1, $3, $4 FROM live
ON CONFLICT (run_id, seq) DO UPDATE SET name = t.name
RETURNING t.token
