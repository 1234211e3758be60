-- Failures (failed and lost jobs) grouped by error text, of queue $1 (NULL: every queue) in the
-- hours from $2 on, most frequent first, at most $3 groups.
SELECT queue, error, sum(jobs)::bigint AS jobs, max(last_at) AS last_at,
       (array_agg(last_job_id ORDER BY last_at DESC))[1] AS last_job_id
FROM dl_stats_errors
WHERE hour >= $2::timestamptz
  AND ($1::text IS NULL OR queue = $1::text)
GROUP BY queue, error
ORDER BY jobs DESC, last_at DESC, queue, error
LIMIT $3;
