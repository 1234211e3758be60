-- The inputs of the autoscaling signal (flow/scaling.py) per queue: runnable queued jobs (due, not
-- parked), running jobs, how long the oldest runnable one has waited, jobs finished in the last
-- $2 seconds, the pause and the global concurrency limit. For queue $1, or for every queue with live
-- jobs or flow state when $1 is NULL (the dl_queue_desired_workers metric, read at scrape time).
-- An operator read: the live counts come from the partial indexes of queued and running jobs; the
-- recent finishes from ix_dl_jobs_finished (queue, status, finished_at), one range per queue and
-- finished status (never a walk of the finished history, which retention may keep for months).
-- The age is a float8 difference of epochs, so an extreme stored time gives Infinity, not an
-- "interval out of range" error (the function reads it as 0).
-- $1 queue (NULL: all), $2 window in seconds.
WITH RECURSIVE
-- @include queued_queues_walk
, runnable AS (
    -- index-only on ix_dl_jobs_claim_order (queued, not parked), whose columns hold all it reads:
    -- a filter on key_parked or available_at over every live row made this a walk of the table
    SELECT queue, count(*) AS runnable,
           date_part('epoch', now()) - date_part('epoch', min(available_at)) AS oldest_age_sec
    FROM dl_jobs
    WHERE status = 'queued' AND NOT key_parked AND available_at <= now()
      AND ($1::text IS NULL OR queue = $1::text)
    GROUP BY queue
), running AS (
    SELECT queue, count(*) AS running
    FROM dl_jobs
    WHERE status = 'running' AND ($1::text IS NULL OR queue = $1::text)
    GROUP BY queue
), named AS (
    SELECT queue FROM queued_queues WHERE queue IS NOT NULL
    UNION SELECT queue FROM running
    UNION SELECT queue FROM dl_queue_flow WHERE $1::text IS NULL OR queue = $1::text
    UNION SELECT $1::text WHERE $1::text IS NOT NULL
)
SELECT n.queue,
       COALESCE(w.runnable, 0)::bigint AS runnable,
       COALESCE(r.running, 0)::bigint AS running,
       w.oldest_age_sec::float8 AS oldest_age_sec,
       -- one range of ix_dl_jobs_finished (queue, status, finished_at) per finished status: with
       -- the statuses as one IN list, PostgreSQL 15 walked all of a queue's finished jobs (35 ms a
       -- queue on 4 M jobs)
       (SELECT count(*)
        FROM unnest(ARRAY['succeeded', 'failed', 'canceled', 'lost']::dl_status[]) AS s(status)
        CROSS JOIN LATERAL (
            SELECT 1 FROM dl_jobs d
            WHERE d.queue = n.queue AND d.status = s.status
              AND d.status IN ('succeeded', 'failed', 'canceled', 'lost')
              AND d.finished_at > now() - make_interval(secs => $2::float8)
            OFFSET 0
        ) recent)::bigint AS finished_recently,
       COALESCE(f.paused, false) AS paused,
       f.concurrency
FROM named n
LEFT JOIN runnable w ON w.queue = n.queue
LEFT JOIN running r ON r.queue = n.queue
LEFT JOIN dl_queue_flow f ON f.queue = n.queue
ORDER BY n.queue;
