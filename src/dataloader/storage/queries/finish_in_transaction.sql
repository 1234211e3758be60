-- Finish a job as succeeded inside the pipeline's own transaction (`ctx.transaction()`), so its
-- business writes, this state change and its journal row commit or roll back together (River's
-- JobCompleteTx). $1 job_id, $2 attempt, $3 next: the jobs its success enqueues (a JSON array of
-- complete rows, see finish_jobs.sql; NULL for none), committed with everything else. $4: the attempt's
-- span (W3C traceparent, NULL when not traced): the next stages' traceparent, as in finish_jobs.sql.
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
        finished_at = now(),
        chain_id = CASE WHEN $3::text IS NOT NULL THEN COALESCE(chain_id, job_id) ELSE chain_id END
    WHERE job_id = $1 AND attempt = $2 AND status = 'running'
    -- the columns finish_chain_next.sql reads: this finish's next stages are $3, its span $4
    RETURNING job_id, queue, attempt, chain_id, status, $3::text AS next, $4::text AS span
),
-- @include finish_chain_next
journal AS (
    INSERT INTO dl_job_events (job_id, queue, kind, payload)
    SELECT job_id, queue, 'done',
           jsonb_strip_nulls(jsonb_build_object('attempt', attempt, 'transaction', true,
                                                'next_jobs', jsonb_array_length($3::text::jsonb)))
    FROM ended
)
SELECT job_id FROM ended;
