-- Every queue with live or held jobs: due and delayed queued jobs, running jobs, held (dead-letter)
-- jobs, and the age of the oldest due job. No parameters.
-- An operator read (the console's overview, GET /api/v1/stats/depths), not a hot path. Live rows
-- come from one pass over the queued and running rows (ix_dl_jobs_status_queue); held rows from the
-- failed rows with held_at set, which the trouble index (0014) narrows to failed ones. The waiting
-- age is clamped like queue_stats.sql, so no stored time (+-infinity, a created_at in the future)
-- can make the subtraction overflow.
WITH live AS (
    SELECT queue,
           count(*) FILTER (WHERE status = 'queued' AND available_at <= now()) AS queued,
           count(*) FILTER (WHERE status = 'queued' AND available_at > now()) AS delayed,
           count(*) FILTER (WHERE status = 'running') AS running,
           extract(epoch FROM now() - min(GREATEST(LEAST(GREATEST(available_at, created_at), now()),
                                                   timestamptz '1970-01-01 00:00:00+00'))
                                     FILTER (WHERE status = 'queued' AND available_at <= now()))::float8
               AS oldest_waiting_sec
    FROM dl_jobs
    WHERE status IN ('queued', 'running')
    GROUP BY queue
), held AS (
    SELECT queue, count(*) AS held
    FROM dl_jobs
    WHERE status = 'failed' AND held_at IS NOT NULL
    GROUP BY queue
)
SELECT COALESCE(l.queue, h.queue) AS queue,
       COALESCE(l.queued, 0)::bigint AS queued,
       COALESCE(l.delayed, 0)::bigint AS delayed,
       COALESCE(l.running, 0)::bigint AS running,
       COALESCE(h.held, 0)::bigint AS held,
       l.oldest_waiting_sec
FROM live l
FULL JOIN held h ON h.queue = l.queue
ORDER BY 1;
