-- insert_job.sql for a job without an idempotency key ($5 NULL), the commonest enqueue: nothing can
-- conflict, so there is no ON CONFLICT, whose speculative insertion (a token on the row, then a
-- second WAL record to confirm it) every row of insert_job.sql pays. It always inserts.
-- Parameters, journal row and answer as in insert_job.sql.
WITH inserted AS (
-- @include insert_job_row
    RETURNING job_id, queue, task, args, available_at, created_at, chain_next, request_id
-- @include insert_job_answer
