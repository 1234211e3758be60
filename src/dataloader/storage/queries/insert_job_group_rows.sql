-- The input and the dl_jobs rows of a group of single enqueues (insert_job_group.sql,
-- insert_job_group_unkeyed.sql include it right after `WITH`; the keyed one adds its ON CONFLICT
-- after it): each row is what insert_job.sql inserts for one call. Parameters are insert_job.sql's
-- $1..$16 as arrays, one element per call; every job_id is given.
input AS (
    SELECT *
    FROM unnest($1::uuid[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[],
                $8::int[], $9::timestamptz[], $10::int[], $11::int[], $12::text[], $13::text[], $14::int[],
                $15::text[], $16::text[])
         AS t(job_id, queue, task, args, idempotency_key, lock_key, partition_key, priority, available_at,
              max_attempts, lease_ttl_sec, producer, request_id, timeout_sec, chain_next, traceparent)
), inserted AS (
    INSERT INTO dl_jobs (job_id, queue, task, args, idempotency_key, lock_key, partition_key,
                         priority, available_at, max_attempts, lease_ttl_sec, producer, timeout_sec,
                         chain_next, chain_id, request_id, traceparent)
    SELECT job_id, queue, task, args::jsonb, idempotency_key, lock_key, partition_key, priority,
           COALESCE(available_at, now()), max_attempts, lease_ttl_sec, producer, timeout_sec,
           chain_next::jsonb, CASE WHEN chain_next IS NOT NULL THEN job_id END, request_id, traceparent
    FROM input
