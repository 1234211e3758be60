-- A fragment, included by journal_lock_expired.sql and journal_stage_survivors.sql on the row j of
-- dl_jobs: a job the retention policy lets go: finished, not held, and finished longer ago than its
-- (queue, status) age, at least $6 seconds (the stats rollup's lag). Never NULL: a status with no
-- age (kept for ever) or a finished row without finished_at is not expired, so `NOT` of this keeps
-- it. $1 statuses and $2 their ages (the defaults), $3 queues, $4 statuses and $5 ages (the
-- per-queue overrides, parallel arrays), $6 the floor.
    COALESCE(j.status IN ('succeeded', 'failed', 'canceled', 'lost')
    AND j.held_at IS NULL
    -- (GREATEST skips a NULL: the age's absence must stay NULL, hence the WHERE, not GREATEST alone)
    AND j.finished_at < now() - make_interval(secs => (
        SELECT GREATEST(a.age, $6::float8)
        FROM (SELECT COALESCE((SELECT o.age FROM unnest($3::text[], $4::text[], $5::float8[]) AS o(queue, status, age)
                               WHERE o.queue = j.queue AND o.status = j.status::text LIMIT 1),
                              (SELECT d.age FROM unnest($1::text[], $2::float8[]) AS d(status, age)
                               WHERE d.status = j.status::text LIMIT 1)) AS age) AS a
        WHERE a.age IS NOT NULL)), false)
