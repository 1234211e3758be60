-- Failures (failed and lost jobs) grouped by error text, of queue $1 (NULL: every queue) in the
-- hours from $2 on, most frequent first, at most $3 groups.
-- Two parts, summed per group: the rolled-up hours (dl_stats_errors: jobs finished before the
-- watermark), and the failures the rollup has not reached yet, read from dl_jobs, so a failure
-- shows at once instead of DL_STATS_LAG_SEC + a period later (issue 24: `ops errors` right after
-- a failure). The tail starts at $4: the watermark, or $2 when that is later or there is none,
-- read by the caller in this statement's snapshot (the rollup counts [old, new) ranges, so no job
-- is in both parts). A parameter, not a read of dl_stats_state here: as a value of the plan the
-- bound is an index condition, where from a CTE it was a filter, and PostgreSQL 15 read every
-- finished job of each queue through ix_dl_jobs_status_queue (0.9-1.3 s on 4 M jobs). The tail is
-- found per (queue, status) as one range of ix_dl_jobs_finished, the queues by the loose scan of
-- rollup.sql, and grouped as rollup.sql groups (first line, trimmed, 200 characters).
WITH RECURSIVE
-- @include finished_queues_walk
, tail AS (
    SELECT j.queue, j.finished_at, j.job_id,
           COALESCE(NULLIF(left(btrim(split_part(j.error, E'\n', 1), E' \t\r'), 200), ''),
                    '(no error text)') AS error_group
    FROM queues q
    CROSS JOIN unnest(ARRAY['failed', 'lost']::dl_status[]) AS s(status)
    JOIN LATERAL (
        SELECT f.queue, f.finished_at, f.job_id, f.error
        FROM dl_jobs f
        WHERE f.queue = q.queue AND f.status = s.status
          AND f.status IN ('succeeded', 'failed', 'canceled', 'lost')
          AND f.finished_at >= $4::timestamptz
        OFFSET 0
    ) j ON true
    WHERE q.queue IS NOT NULL AND ($1::text IS NULL OR q.queue = $1::text)
), groups AS (
    SELECT queue, error, jobs, last_at, last_job_id
    FROM dl_stats_errors
    WHERE hour >= $2::timestamptz
      AND ($1::text IS NULL OR queue = $1::text)
    UNION ALL
    SELECT queue, error_group, count(*), max(finished_at),
           (array_agg(job_id ORDER BY finished_at DESC, job_id))[1]
    FROM tail
    GROUP BY queue, error_group
)
SELECT queue, error, sum(jobs)::bigint AS jobs, max(last_at) AS last_at,
       (array_agg(last_job_id ORDER BY last_at DESC))[1] AS last_job_id
FROM groups
GROUP BY queue, error
ORDER BY jobs DESC, last_at DESC, queue, error
LIMIT $3;
