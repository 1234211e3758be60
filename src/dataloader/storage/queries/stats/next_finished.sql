-- The earliest finished_at in [$1, $2) over every queue and finished status (NULL: none), so the
-- rollup jumps over empty stretches (a first start with a 90-day window, a quiet weekend) in one
-- step instead of an hour at a time. One probe of ix_dl_jobs_finished per (queue, status).
WITH RECURSIVE
-- @include finished_queues_walk
SELECT min(f.finished_at) AS next_finished
FROM queues q
CROSS JOIN unnest(ARRAY['succeeded', 'failed', 'canceled', 'lost']::dl_status[]) AS s(status)
CROSS JOIN LATERAL (
    SELECT j.finished_at FROM dl_jobs j
    WHERE j.queue = q.queue AND j.status = s.status
      AND j.status IN ('succeeded', 'failed', 'canceled', 'lost')
      AND j.finished_at >= $1::timestamptz AND j.finished_at < $2::timestamptz
    ORDER BY j.finished_at
    LIMIT 1
) f
WHERE q.queue IS NOT NULL;
