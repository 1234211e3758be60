-- Take the advisory lock of a running attempt again on a new connection (after a reconnect).
-- $1 job_id, $2 attempt, $3 lock_key. Returns no row if the attempt was fenced off meanwhile.
SELECT pg_try_advisory_lock(hashtext($3)) AS locked
FROM dl_jobs
WHERE job_id = $1 AND status = 'running' AND attempt = $2;
