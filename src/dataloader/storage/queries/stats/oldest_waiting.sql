-- The oldest waiting (queued and due) job of each queue, or of queue $1 only. The queues come from
-- a loose scan (queued_queues_walk) and each queue's oldest from one probe of
-- ix_dl_jobs_claim (queue, available_at) WHERE status = 'queued': a few index reads per queue
-- whatever the backlog. "Oldest" is by available_at (the time the job became due); the age is
-- clamped like queue_stats.sql so no stored time can overflow.
WITH RECURSIVE
-- @include queued_queues_walk
SELECT q.queue, o.job_id, o.task, o.available_at,
       extract(epoch FROM now() - GREATEST(LEAST(GREATEST(o.available_at, o.created_at), now()),
                                           timestamptz '1970-01-01 00:00:00+00'))::float8 AS age_sec
FROM queued_queues q
JOIN LATERAL (
    SELECT j.job_id, j.task, j.available_at, j.created_at
    FROM dl_jobs j
    WHERE j.queue = q.queue AND j.status = 'queued' AND j.available_at <= now()
    ORDER BY j.available_at
    LIMIT 1
) o ON true
WHERE q.queue IS NOT NULL
ORDER BY q.queue;
