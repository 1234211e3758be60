-- Extend the leases of running attempts ($1 job ids, $2 their attempts) and journal a heartbeat
-- for each. Fenced: an attempt that is no longer running with that number gets no row back.
WITH beat AS (
    UPDATE dl_jobs j
    SET heartbeat_at = now(),
        lease_expires_at = now() + make_interval(secs => j.lease_ttl_sec)
    FROM unnest($1::uuid[], $2::int[]) AS i(job_id, attempt)
    WHERE j.job_id = i.job_id AND j.status = 'running' AND j.attempt = i.attempt
    RETURNING j.job_id, j.queue, j.attempt, j.cancel_requested
), journal AS (
    INSERT INTO dl_job_events (job_id, queue, kind, payload)
    SELECT job_id, queue, 'heartbeat', jsonb_build_object('attempt', attempt) FROM beat
)
SELECT job_id, cancel_requested FROM beat;
