-- The single enqueues of concurrent callers in one statement and one commit (group commit,
-- storage/insert_group.py): each row is what insert_job.sql inserts for one call, with its own
-- 'queued' journal row, and the statement returns the rows actually inserted (a known
-- idempotency_key inserts nothing; the caller then reads the existing job, as after insert_job.sql),
-- with insert_job.sql's columns.
-- Parameters are insert_job.sql's $1..$16 as arrays, one element per call; every job_id is given.
-- Two calls of one group with the same idempotency_key: the second conflicts with the first's
-- row of this same statement and inserts nothing, exactly as if it came a moment later.
-- A group where no call has a key runs insert_job_group_unkeyed.sql instead.
WITH
-- @include insert_job_group_rows
    ON CONFLICT (idempotency_key) DO NOTHING
    RETURNING job_id, queue, task, args, available_at, created_at, chain_next, request_id
-- @include insert_job_answer
