    -- a job the retention policy lets go: finished, not held, and finished longer ago than its
    -- (queue, status) age ($6 queues, $7 statuses, $8 ages: the per-queue overrides; else $4
    -- statuses, $5 ages: the defaults), at least $9 seconds (the stats rollup's lag). A status with
    -- no age is kept: the comparison with a NULL interval is never true.
    j.status IN ('succeeded', 'failed', 'canceled', 'lost')
    AND j.held_at IS NULL
    AND j.finished_at < now() - make_interval(secs => GREATEST(
        COALESCE((SELECT o.age FROM unnest($6::text[], $7::text[], $8::float8[]) AS o(queue, status, age)
                  WHERE o.queue = j.queue AND o.status = j.status::text LIMIT 1),
                 (SELECT d.age FROM unnest($4::text[], $5::float8[]) AS d(status, age)
                  WHERE d.status = j.status::text LIMIT 1)),
        $9::float8))
