-- Extend the lease of one attempt. Fenced: refused (no row) unless the job is still running
-- with the attempt this worker claimed. $1 job_id, $2 attempt.
WITH beat AS (
    UPDATE dl_jobs
    SET heartbeat_at = now(),
        lease_expires_at = now() + make_interval(secs => lease_ttl_sec)
    WHERE job_id = $1 AND status = 'running' AND attempt = $2
    RETURNING job_id, queue, cancel_requested, lease_expires_at
), journal AS (
    INSERT INTO dl_job_events (job_id, queue, kind, payload)
    SELECT job_id, queue, 'heartbeat', jsonb_build_object('attempt', $2::int) FROM beat
)
SELECT cancel_requested, lease_expires_at FROM beat;
