-- Take the advisory locks of running attempts again on a new control connection (after the old
-- one was lost, and its locks with it). $1 job ids, $2 attempts, $3 lock keys.
-- alive = false: the attempt was fenced off meanwhile; locked = false: someone else holds the key.
SELECT i.job_id,
       j.job_id IS NOT NULL AS alive,
       CASE WHEN j.job_id IS NOT NULL THEN pg_try_advisory_lock(hashtext(i.lock_key)) END AS locked
FROM unnest($1::uuid[], $2::int[], $3::text[]) AS i(job_id, attempt, lock_key)
LEFT JOIN dl_jobs j ON j.job_id = ANY ($1::uuid[]) AND j.job_id = i.job_id AND j.status = 'running' AND j.attempt = i.attempt;
