-- The part of a `WITH RECURSIVE` that walks the queues with queued jobs (due, delayed or parked):
-- a loose scan of an index of queued jobs that leads with the queue (ix_dl_jobs_claim or
-- ix_dl_jobs_claim_order), one probe per queue, never a count of the backlog. Of queue $1 only
-- when $1 is not NULL. Its last row is NULL (the walk's end): readers skip it. Included where a
-- statement says `-- @include queued_queues_walk`, right after `WITH RECURSIVE` or a CTE's comma.
queued_queues AS (
    (SELECT queue FROM dl_jobs
     WHERE status = 'queued' AND ($1::text IS NULL OR queue = $1::text)
     ORDER BY queue LIMIT 1)
    UNION ALL
    SELECT (SELECT j.queue FROM dl_jobs j
            WHERE j.status = 'queued' AND j.queue > q.queue AND $1::text IS NULL
            ORDER BY j.queue LIMIT 1)
    FROM queued_queues q
    WHERE q.queue IS NOT NULL
)
