-- Enqueue one job with its 'queued' journal row. An existing idempotency_key inserts nothing
-- (the caller then reads the existing job). $1..$15 as in JobRepository.insert_job ($14: the job's
-- run-time limit in seconds, NULL for none of its own; $15: the stages planned after it, JSON
-- text or NULL: a job with a plan starts a chain, its own id the chain's; $16: the caller's W3C
-- traceparent, NULL when tracing is off, 0020); $4 (args) is
-- JSON text, so the statement also runs on a caller's connection that has no jsonb codec of ours.
-- It returns only what the database decided (the id is given; the rest the caller sent, or is a
-- column default: repositories.inserted_job builds the Job from both), not the row's ~34 columns.
WITH inserted AS (
    INSERT INTO dl_jobs (job_id, queue, task, args, idempotency_key, lock_key, partition_key,
                         priority, available_at, max_attempts, lease_ttl_sec, producer, timeout_sec,
                         chain_next, chain_id, request_id, traceparent)
    VALUES ($1, $2, $3, $4::text::jsonb, $5, $6, $7, $8, COALESCE($9, now()), $10, $11, $12, $14::int,
            $15::text::jsonb, CASE WHEN $15::text IS NOT NULL THEN $1::uuid END, $13::text, $16::text)
    ON CONFLICT (idempotency_key) DO NOTHING
    RETURNING job_id, queue, task, args, available_at, created_at, chain_next
), journal AS (
    INSERT INTO dl_job_events (job_id, queue, kind, payload)
    SELECT job_id, queue, 'queued',
           jsonb_strip_nulls(jsonb_build_object('task', task, 'request_id', $13::text))
    FROM inserted
)
-- The empty object, the commonest args, comes back as NULL: nothing to decode (inserted_job).
SELECT job_id, NULLIF(args, '{}'::jsonb) AS args, available_at, created_at, chain_next FROM inserted;
