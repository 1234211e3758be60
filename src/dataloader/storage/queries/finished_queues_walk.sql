-- The part of a `WITH RECURSIVE` that walks the queues with finished jobs: a loose scan of
-- ix_dl_jobs_finished (migration 0009), one index probe per queue instead of reading every finished
-- row, so the pruner and the stats find their queues in O(queues × log n) on any table size. Its
-- last row is NULL (the walk's end): readers skip it. Included where a statement says
-- `-- @include finished_queues_walk`, right after `WITH RECURSIVE` or a CTE's comma.
queues AS (
    (SELECT queue FROM dl_jobs
     WHERE status IN ('succeeded', 'failed', 'canceled', 'lost')
     ORDER BY queue LIMIT 1)
    UNION ALL
    SELECT (SELECT j.queue FROM dl_jobs j
            WHERE j.status IN ('succeeded', 'failed', 'canceled', 'lost') AND j.queue > q.queue
            ORDER BY j.queue LIMIT 1)
    FROM queues q
    WHERE q.queue IS NOT NULL
)
