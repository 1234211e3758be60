-- Store pipeline progress. Fenced like the heartbeat. $1 job_id, $2 attempt, $3 progress.
UPDATE dl_jobs
SET progress = $3
WHERE job_id = $1 AND status = 'running' AND attempt = $2
RETURNING cancel_requested;
