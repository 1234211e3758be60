-- The jobs finished in [$1, $2) by queue (of queue $3 only, when not NULL), hour and status, read from dl_jobs: the part of a
-- report the rollup has not counted yet ($1 is its watermark, or the report's start when that is
-- later or there is none; $2 is now). The overview adds it to the rolled-up hours so "Finished
-- jobs" counts a job the moment it finished, not a rollup period or two later. Normally a minute
-- or two of jobs: one range of ix_dl_jobs_finished per (queue, status), the queues found by the
-- loose scan of the same index, as the rollup reads them.
WITH RECURSIVE
-- @include finished_queues_walk
SELECT q.queue, s.status::text AS status, date_trunc('hour', j.finished_at, 'UTC') AS hour,
       count(*)::bigint AS jobs
FROM queues q
CROSS JOIN unnest(ARRAY['succeeded', 'failed', 'canceled', 'lost']::dl_status[]) AS s(status)
JOIN LATERAL (
    SELECT f.finished_at
    FROM dl_jobs f
    WHERE f.queue = q.queue AND f.status = s.status
      AND f.status IN ('succeeded', 'failed', 'canceled', 'lost')
      AND f.finished_at >= $1::timestamptz AND f.finished_at < $2::timestamptz
) j ON true
WHERE q.queue IS NOT NULL AND ($3::text IS NULL OR q.queue = $3::text)
GROUP BY q.queue, s.status, date_trunc('hour', j.finished_at, 'UTC')
ORDER BY q.queue, hour, status;
