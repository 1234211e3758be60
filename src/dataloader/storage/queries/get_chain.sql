-- The jobs of a chain, oldest first (args left out: listings never carry them). $1: the chain's id,
-- or the id of any job in it (a job of no chain gives nothing); $2: at most this many jobs.
-- ix_dl_jobs_chain (0011) serves it. The chain's id is its first job's, which stays usable after
-- retention deleted that job.
SELECT job_id, queue, task, lock_key, status, attempt, max_attempts, priority, available_at, created_at,
       started_at, finished_at, heartbeat_at, error, progress, result, chain_id, parent_job_id, chain_next,
       idempotency_key, partition_key, lease_ttl_sec, timeout_sec, producer
FROM dl_jobs
WHERE chain_id = COALESCE((SELECT chain_id FROM dl_jobs WHERE job_id = $1), $1)
ORDER BY created_at, job_id
LIMIT $2;
