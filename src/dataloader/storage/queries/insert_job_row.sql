-- The dl_jobs row of one enqueue (insert_job.sql, insert_job_unkeyed.sql include it as the body of
-- their `inserted` CTE; the keyed one adds its ON CONFLICT after it). Parameters $1..$16 as in insert_job.sql.
    INSERT INTO dl_jobs (job_id, queue, task, args, idempotency_key, lock_key, partition_key,
                         priority, available_at, max_attempts, lease_ttl_sec, producer, timeout_sec,
                         chain_next, chain_id, request_id, traceparent)
    VALUES ($1, $2, $3, $4::text::jsonb, $5, $6, $7, $8, COALESCE($9, now()), $10, $11, $12, $14::int,
            $15::text::jsonb, CASE WHEN $15::text IS NOT NULL THEN $1::uuid END, $13::text, $16::text)
