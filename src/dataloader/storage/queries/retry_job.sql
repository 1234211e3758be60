-- Put a failed, canceled or lost job back to the queue ($1 job_id) with a fresh attempt budget:
-- attempt keeps counting (it fences every write), attempts_before_retry marks where the new budget
-- starts. The error of the last run stays until the next run ends. $2 request id (journal).
-- previous_status is NULL when there is no such job; retried is false when its status forbids it.
WITH target AS (
    SELECT job_id, status FROM dl_jobs WHERE job_id = $1 FOR UPDATE
), retried AS (
    UPDATE dl_jobs j
    SET status = 'queued',
        available_at = now(),
        attempts_before_retry = j.attempt,
        cancel_requested = false,
        lease_expires_at = NULL,
        finished_at = NULL,
        -- back in the queue as a plain job: it never takes over a restartable job's re-triggers
        restart_key = NULL,
        -- a held job is released by its retry (0014); a fresh wait for the queue-time limit
        held_at = NULL, held_reason = NULL, queue_overdue_at = NULL,
        -- parked before its cancel or queue-time failure: back in the claim's walk (0017)
        key_parked = false
    FROM target t
    WHERE j.job_id = $1 AND j.job_id = t.job_id AND t.status IN ('failed', 'canceled', 'lost')
    RETURNING j.job_id, j.queue, j.attempt, t.status AS previous_status
), journal AS (
    INSERT INTO dl_job_events (job_id, queue, kind, payload)
    SELECT job_id, queue, 'requeue',
           jsonb_strip_nulls(jsonb_build_object('reason', 'manual_retry', 'attempt', attempt,
                                                'previous_status', previous_status::text,
                                                'request_id', $2::text))
    FROM retried
)
SELECT t.status::text AS previous_status, (SELECT count(*) FROM retried) > 0 AS retried
FROM target t;
