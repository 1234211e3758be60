-- The jobs of a chain, oldest first (args left out: listings never carry them). $1: the chain's id,
-- or the id of any job in it (a job of no chain gives nothing); $2: at most this many jobs.
-- ix_dl_jobs_chain (0011) serves it. The chain's id is its first job's, which stays usable after
-- retention deleted that job. A join stage (0032) comes with its members' count and how many have
-- not ended yet (`join_members`, `join_remaining`; NULL for any other stage).
SELECT j.job_id, j.queue, j.task, j.lock_key, j.status, j.attempt, j.max_attempts, j.priority, j.available_at,
       j.created_at, j.started_at, j.finished_at, j.heartbeat_at, j.error, j.progress, j.result, j.chain_id,
       j.parent_job_id, j.chain_next, j.idempotency_key, j.partition_key, j.lease_ttl_sec, j.timeout_sec, j.producer,
       cj.members AS join_members, cj.remaining AS join_remaining
FROM dl_jobs j
LEFT JOIN dl_chain_joins cj ON cj.join_job_id = j.job_id
WHERE j.chain_id = COALESCE((SELECT c.chain_id FROM dl_jobs c WHERE c.job_id = $1), $1)
ORDER BY j.created_at, j.job_id
LIMIT $2;
