-- A fragment, included by journal_lock_expired.sql and journal_stage_survivors.sql on the row j of
-- dl_jobs: a job the retention policy lets go: finished, not held, and finished longer ago than its
-- (queue, status) age, at least $6 seconds (the stats rollup's lag). A status with no age is kept:
-- the comparison with a NULL interval is never true. $1 statuses and $2 their ages (the defaults),
-- $3 queues, $4 statuses and $5 ages (the per-queue overrides, parallel arrays), $6 the floor.
    j.status IN ('succeeded', 'failed', 'canceled', 'lost')
    AND j.held_at IS NULL
    AND j.finished_at < now() - make_interval(secs => GREATEST(
        COALESCE((SELECT o.age FROM unnest($3::text[], $4::text[], $5::float8[]) AS o(queue, status, age)
                  WHERE o.queue = j.queue AND o.status = j.status::text LIMIT 1),
                 (SELECT d.age FROM unnest($1::text[], $2::float8[]) AS d(status, age)
                  WHERE d.status = j.status::text LIMIT 1)),
        $6::float8))
