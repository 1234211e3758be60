-- Enqueue one job with its 'queued' journal row. An existing idempotency_key inserts nothing
-- (the caller then reads the existing job). $1..$15 as in JobRepository.insert_job ($14: the job's
-- run-time limit in seconds, NULL for none of its own; $15: the stages planned after it, JSON
-- text or NULL: a job with a plan starts a chain, its own id the chain's; $16: the caller's W3C
-- traceparent, NULL when tracing is off, 0020); $4 (args) is
-- JSON text, so the statement also runs on a caller's connection that has no jsonb codec of ours.
-- It returns only what the database decided (the id is given; the rest the caller sent, or is a
-- column default: repositories.inserted_job builds the Job from both), not the row's ~34 columns.
-- A job without an idempotency key runs insert_job_unkeyed.sql instead.
WITH inserted AS (
-- @include insert_job_row
    ON CONFLICT (idempotency_key) DO NOTHING
    RETURNING job_id, queue, task, args, available_at, created_at, chain_next, request_id
-- @include insert_job_answer
