-- A finish's chain step, included by both finishes that end jobs as succeeded (finish_jobs.sql,
-- finish_in_transaction.sql) right after their `ended` CTE (its rows: job_id, chain_id, status,
-- next, span): each succeeded row's `next` (a JSON array of complete rows built by
-- workers/chaining.py) is inserted as its next stages, parent = the finished job, chain = its
-- chain, traceparent = the finished attempt's span, producer 'chain'; each gets a 'queued' journal
-- row; join stages get their fan-in rows (finish_chain_joins.sql). A next row whose idempotency
-- key is taken is skipped (ON CONFLICT): a retried finish enqueues its stages once. No parameters.
next_jobs AS (
    INSERT INTO dl_jobs (job_id, queue, task, args, idempotency_key, lock_key, partition_key, priority,
                         available_at, max_attempts, lease_ttl_sec, producer, timeout_sec, chain_id,
                         parent_job_id, chain_next, traceparent)
    SELECT (n->>'job_id')::uuid, n->>'queue', n->>'task', n->'args', n->>'idempotency_key', n->>'lock_key',
           n->>'partition_key', (n->>'priority')::int,
           now() + make_interval(secs => (n->>'delay_sec')::float8), (n->>'max_attempts')::int,
           (n->>'lease_ttl_sec')::int, 'chain', (n->>'timeout_sec')::int, e.chain_id, e.job_id,
           NULLIF(n->'chain_next', 'null'::jsonb), e.span
    FROM ended e, jsonb_array_elements(e.next::jsonb) AS n
    WHERE e.status = 'succeeded' AND e.next IS NOT NULL
    ON CONFLICT (idempotency_key) DO NOTHING
    RETURNING job_id, queue, task, parent_job_id
), next_journal AS (
    INSERT INTO dl_job_events (job_id, queue, kind, payload)
    SELECT job_id, queue, 'queued', jsonb_build_object('task', task, 'parent_job_id', parent_job_id)
    FROM next_jobs
), join_rows AS (
    SELECT n FROM ended e, jsonb_array_elements(e.next::jsonb) AS n
    WHERE e.status = 'succeeded' AND e.next IS NOT NULL AND n ? 'join_members'
),
-- @include finish_chain_joins
