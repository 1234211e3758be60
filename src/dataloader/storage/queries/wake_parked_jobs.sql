-- Queued jobs that were held back (lock_busy) because an attempt of this worker that no longer runs
-- still held their lock_key (a sync pipeline's thread past its run-time limit): that key was just
-- released in this step, so they may run now instead of after DL_CLAIM_BACKOFF_SEC. $1 job ids,
-- $2 the available_at each was held back to: a job moved since (re-triggered, claimed) is left
-- alone. The update trigger NOTIFYs the queue.
UPDATE dl_jobs j
SET available_at = now()
FROM unnest($1::uuid[], $2::timestamptz[]) AS w(job_id, available_at)
WHERE j.job_id = ANY ($1::uuid[]) AND j.job_id = w.job_id AND j.status = 'queued' AND j.available_at = w.available_at;
