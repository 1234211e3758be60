-- Bulk requeue of the jobs $1 (uuid[]) for operation $2: the single-job retry's compare-and-set
-- (retry_job.sql, the same SET): only a failed, canceled or lost row goes back to the queue, with a fresh attempt
-- budget (attempt keeps counting: it fences the old run's writes). A held job is released by it.
-- Journal 'requeue' with reason 'bulk_requeue' and the operation id, in the same statement.
WITH changed AS (
    UPDATE dl_jobs j
    SET status = 'queued', available_at = now(), attempts_before_retry = j.attempt, cancel_requested = false,
        lease_expires_at = NULL, finished_at = NULL, restart_key = NULL, held_at = NULL, held_reason = NULL,
        queue_overdue_at = NULL, key_parked = false
    WHERE j.job_id = ANY ($1::uuid[]) AND j.status IN ('failed', 'canceled', 'lost')
    RETURNING j.job_id, j.queue, j.attempt
), journal AS (
    INSERT INTO dl_job_events (job_id, queue, kind, payload)
    SELECT job_id, queue, 'requeue',
           jsonb_build_object('reason', 'bulk_requeue', 'operation_id', $2::uuid, 'attempt', attempt)
    FROM changed
)
SELECT count(*)::bigint AS changed FROM changed;
