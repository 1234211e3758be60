-- The single enqueues of concurrent callers in one statement and one commit (group commit,
-- storage/insert_group.py): each row is what insert_job.sql inserts for one call, with its own
-- 'queued' journal row, and the statement returns the rows actually inserted (a known
-- idempotency_key inserts nothing; the caller then reads the existing job, as after insert_job.sql),
-- with insert_job.sql's columns.
-- Parameters are insert_job.sql's $1..$16 as arrays, one element per call; every job_id is given.
-- Two calls of one group with the same idempotency_key: the second conflicts with the first's
-- row of this same statement and inserts nothing, exactly as if it came a moment later.
WITH input AS (
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
    ON CONFLICT (idempotency_key) DO NOTHING
    RETURNING job_id, queue, task, args, available_at, created_at, chain_next
), journal AS (
    INSERT INTO dl_job_events (job_id, queue, kind, payload)
    SELECT i.job_id, i.queue, 'queued', jsonb_strip_nulls(jsonb_build_object('task', i.task, 'request_id', n.request_id))
    FROM inserted i JOIN input n USING (job_id)
)
-- The empty object, the commonest args, comes back as NULL: nothing to decode (inserted_job).
SELECT job_id, NULLIF(args, '{}'::jsonb) AS args, available_at, created_at, chain_next FROM inserted;
