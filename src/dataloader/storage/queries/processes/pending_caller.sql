-- Whether a call or repair of the process waits in the queue ($1 its lock_key, $2 the caller
-- priority, $3 the asking timer's own job): a timer that finds one steps aside behind it, so the
-- timer stays blocked while a call is pending. Served by ix_dl_jobs_lock_key_active.
SELECT EXISTS (
    SELECT 1 FROM dl_jobs
    WHERE lock_key = $1 AND status = 'queued' AND priority <= $2 AND job_id <> $3
) AS pending
