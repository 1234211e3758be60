-- A queued job whose lock_key's advisory lock is held although no job of that key runs (a
-- fenced-off pipeline still winding down, another application's lock with the same hash) waits
-- $2 seconds (DL_CLAIM_BACKOFF_SEC) instead of heading every claim of its queue. $1 job_id.
-- Nothing else changes: it was never claimed, so no attempt is used.
WITH moved AS (
    UPDATE dl_jobs
    SET available_at = now() + make_interval(secs => LEAST(GREATEST($2::float8, 0), 86400))
    WHERE job_id = $1 AND status = 'queued'
    RETURNING job_id, queue, available_at
), journal AS (
    INSERT INTO dl_job_events (job_id, queue, kind, payload)
    SELECT job_id, queue, 'requeue', jsonb_build_object('reason', 'lock_busy', 'available_at', available_at)
    FROM moved
)
SELECT available_at FROM moved;
