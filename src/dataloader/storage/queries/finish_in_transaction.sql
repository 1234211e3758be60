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
    RETURNING job_id, queue, attempt, chain_id
), next_jobs AS (
    INSERT INTO dl_jobs (job_id, queue, task, args, idempotency_key, lock_key, partition_key, priority,
                         available_at, max_attempts, lease_ttl_sec, producer, timeout_sec, chain_id,
                         parent_job_id, chain_next, traceparent)
    SELECT (n->>'job_id')::uuid, n->>'queue', n->>'task', n->'args', n->>'idempotency_key', n->>'lock_key',
           n->>'partition_key', (n->>'priority')::int,
           now() + make_interval(secs => (n->>'delay_sec')::float8), (n->>'max_attempts')::int,
           (n->>'lease_ttl_sec')::int, 'chain', (n->>'timeout_sec')::int, e.chain_id, e.job_id,
           NULLIF(n->'chain_next', 'null'::jsonb), $4::text
    FROM ended e, jsonb_array_elements($3::text::jsonb) AS n
    ON CONFLICT (idempotency_key) DO NOTHING
    RETURNING job_id, queue, task, parent_job_id
), next_journal AS (
    INSERT INTO dl_job_events (job_id, queue, kind, payload)
    SELECT job_id, queue, 'queued', jsonb_build_object('task', task, 'parent_job_id', parent_job_id)
    FROM next_jobs
), join_rows AS (
    SELECT n FROM ended e, jsonb_array_elements($3::text::jsonb) AS n WHERE n ? 'join_members'
),
-- @include finish_chain_joins
journal AS (
    INSERT INTO dl_job_events (job_id, queue, kind, payload)
    SELECT job_id, queue, 'done',
           jsonb_strip_nulls(jsonb_build_object('attempt', attempt, 'transaction', true,
                                                'next_jobs', jsonb_array_length($3::text::jsonb)))
    FROM ended
)
SELECT job_id FROM ended;
