-- Every queue with live or held jobs: due and delayed queued jobs, running jobs, held (dead-letter)
-- jobs, and the age of the oldest due job. No parameters.
-- An operator read (the console's overview, GET /api/v1/stats/depths), not a hot path, shaped so
-- each part reads an index and not the rows: queued jobs from ix_dl_jobs_claim (queue,
-- available_at, priority, created_at WHERE queued), which holds every column the counts and the age
-- need (an index-only scan where the visibility map allows); running jobs from
-- ix_dl_jobs_status_queue; held jobs from ix_dl_jobs_held (0026: held jobs are `failed` rows with held_at set). The waiting age is that of
-- oldest_waiting.sql (from max(available_at, created_at)), clamped like queue_stats.sql, so no
-- stored time (+-infinity, a created_at in the future) can make the subtraction overflow.
WITH queued AS (
    SELECT queue,
           count(*) FILTER (WHERE available_at <= now()) AS queued,
           count(*) FILTER (WHERE available_at > now()) AS delayed,
           extract(epoch FROM now() - min(GREATEST(LEAST(GREATEST(available_at, created_at), now()),
                                                   timestamptz '1970-01-01 00:00:00+00'))
                                     FILTER (WHERE available_at <= now()))::float8 AS oldest_waiting_sec
    FROM dl_jobs
    WHERE status = 'queued'
    GROUP BY queue
), running AS (
    SELECT queue, count(*) AS running
    FROM dl_jobs
    WHERE status = 'running'
    GROUP BY queue
), held AS (
    SELECT queue, count(*) AS held
    FROM dl_jobs
    WHERE status = 'failed' AND held_at IS NOT NULL
    GROUP BY queue
), queues AS (
    SELECT queue FROM queued UNION SELECT queue FROM running UNION SELECT queue FROM held
)
SELECT q.queue,
       COALESCE(w.queued, 0)::bigint AS queued,
       COALESCE(w.delayed, 0)::bigint AS delayed,
       COALESCE(r.running, 0)::bigint AS running,
       COALESCE(h.held, 0)::bigint AS held,
       w.oldest_waiting_sec
FROM queues q
LEFT JOIN queued w ON w.queue = q.queue
LEFT JOIN running r ON r.queue = q.queue
LEFT JOIN held h ON h.queue = q.queue
ORDER BY 1;
