-- insert_jobs_batch.sql for a batch with no idempotency key (the fast path of App.enqueue_many):
-- nothing can be skipped, so there is no ON CONFLICT (a speculative insertion per row) and no join
-- back to the input order; it returns how many rows it inserted (the caller's ids, all of them).
-- Each job still gets its 'queued' journal row in this statement.
-- Parameters as in insert_jobs_rows.sql ($5, the keys, empty or all NULL).
WITH inserted AS (
-- @include insert_jobs_rows
    RETURNING job_id, queue, task, request_id
), journal AS (
-- @include insert_jobs_journal
)
SELECT count(*) AS inserted FROM inserted;
