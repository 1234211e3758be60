-- Finish a job as succeeded inside the pipeline's own transaction (`ctx.transaction()`), so its
-- business writes, this state change and its journal row commit or roll back together (River's
-- JobCompleteTx). $1 job_id, $2 attempt.
-- Fenced like every finish: only the attempt still running with its number matches. No row back
-- means the attempt was fenced off (the reaper took the job back): the caller raises, and the
-- whole transaction, the pipeline's writes included, rolls back.
-- Neither an unlock nor a NOTIFY here: the lock_key's advisory lock is a session lock held on the
-- worker's control connection, which releases it right after this commit and wakes the key's
-- waiters there (finish_jobs.sql, outcome 'committed'). The result column stays NULL: the job
-- ends at the commit, before the pipeline returns anything.
WITH ended AS (
    UPDATE dl_jobs
    SET status = 'succeeded',
        error = NULL,
        lease_expires_at = NULL,
        finished_at = now()
    WHERE job_id = $1 AND attempt = $2 AND status = 'running'
    RETURNING job_id, queue, attempt
), journal AS (
    INSERT INTO dl_job_events (job_id, queue, kind, payload)
    SELECT job_id, queue, 'done', jsonb_build_object('attempt', attempt, 'transaction', true)
    FROM ended
)
SELECT job_id FROM ended;
