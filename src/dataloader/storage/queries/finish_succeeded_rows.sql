-- The finish of a batch of plain successes, shared by finish_succeeded.sql and
-- step_succeeded_claim.sql after their `input` CTE (one row per attempt: job_id, attempt,
-- max_attempts override, lock_key, unlock, result as JSON text): 'succeeded' with its result, the
-- 'done' journal row, and `freed` (each attempt whose key this statement frees) for
-- finish_release_keys.sql. Fenced per row: nothing changes for an attempt that is no longer
-- running with its number.
ended AS (
    UPDATE dl_jobs j
    SET status = 'succeeded',
        error = NULL,
        lease_expires_at = NULL,
        max_attempts = COALESCE(i.max_attempts, j.max_attempts),
        result = i.result::jsonb,
        finished_at = now()
    FROM input i
    -- `status::text`: the rows are found by job_id (the primary key) only; said as `status =
    -- 'running'`, an unanalyzed table let PostgreSQL AND the key lookup with a scan of
    -- ix_dl_jobs_running_lease, which holds an entry per attempt run since the last vacuum
    -- (11,000 read per finish in a 20,000-job drain). The ids as one array (an index condition
    -- on the primary key, computed once).
    WHERE j.job_id = ANY (ARRAY(SELECT job_id FROM input)) AND j.job_id = i.job_id AND j.status::text = 'running'
      AND j.attempt = i.attempt
    RETURNING j.job_id, j.queue, j.status, j.available_at, j.lock_key, i.attempt
), done_journal AS (
    INSERT INTO dl_job_events (job_id, queue, kind, payload)
    SELECT e.job_id, e.queue, 'done', jsonb_build_object('attempt', e.attempt)
    FROM ended e
), freed AS (
    SELECT job_id, lock_key FROM ended
),
