-- Take back running jobs whose lease ran out: queued again, or lost when no attempt is left.
-- SKIP LOCKED makes concurrent reapers on several replicas split the work instead of repeating it.
-- A running row without a lease (never written by the engine, but the table is shared and the schema
-- allows it) would otherwise stay running forever: it is reaped once a lease's time has passed
-- since its last sign of life. $1 batch size.
WITH expired AS (
    SELECT job_id
    FROM dl_jobs
    WHERE status = 'running'
      AND (lease_expires_at < now()
           OR (lease_expires_at IS NULL
               AND COALESCE(heartbeat_at, started_at, '-infinity') < now() - make_interval(secs => lease_ttl_sec)))
    ORDER BY lease_expires_at NULLS FIRST
    LIMIT $1
    FOR UPDATE SKIP LOCKED
), reaped AS (
    UPDATE dl_jobs j
    SET status = CASE WHEN j.cancel_requested THEN 'canceled'
                      WHEN j.attempt - j.attempts_before_retry < j.max_attempts THEN 'queued'
                      ELSE 'lost' END::dl_status,
        available_at = now(),
        lease_expires_at = NULL,
        error = 'lease expired: the worker stopped heartbeating (attempt ' || j.attempt || ')',
        finished_at = CASE WHEN j.attempt - j.attempts_before_retry < j.max_attempts AND NOT j.cancel_requested
                           THEN NULL ELSE now() END
    FROM expired e
    WHERE j.job_id = e.job_id
    RETURNING j.job_id, j.queue, j.task, j.status, j.attempt
), journal AS (
    INSERT INTO dl_job_events (job_id, queue, kind, payload)
    SELECT job_id, queue,
           CASE WHEN status = 'queued' THEN 'requeue' ELSE status::text END,
           jsonb_build_object('attempt', attempt, 'reason', 'lease_expired')
    FROM reaped
)
SELECT job_id, queue, task, status::text AS status, attempt FROM reaped;
