-- Counts by queue and status, and the age of the oldest runnable queued job per queue.
SELECT queue, status::text AS status, count(*) AS jobs,
       extract(epoch FROM now() - min(available_at) FILTER (WHERE available_at <= now()))::float8
           AS oldest_runnable_age_sec
FROM dl_jobs
WHERE status IN ('queued', 'running')
GROUP BY queue, status
ORDER BY queue, status;
