-- Counts by queue and status, and the age of the oldest runnable queued job per queue.
-- A job is runnable since max(available_at, created_at): one enqueued with a time in the past only
-- waits from its enqueue. That moment is clamped into [1970-01-01, now()] so that no stored value
-- (+-infinity, a hand-written created_at in the future) can make the subtraction overflow: one
-- odd row must not take readiness and the metrics of every replica down.
SELECT queue, status::text AS status, count(*) AS jobs,
       extract(epoch FROM now() - min(GREATEST(LEAST(GREATEST(available_at, created_at), now()),
                                               timestamptz '1970-01-01 00:00:00+00'))
                                 FILTER (WHERE available_at <= now()))::float8
           AS oldest_runnable_age_sec
FROM dl_jobs
WHERE status IN ('queued', 'running')
GROUP BY queue, status
ORDER BY queue, status;
