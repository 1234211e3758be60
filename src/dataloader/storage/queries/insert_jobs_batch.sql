-- Enqueue many jobs in one statement, each with its 'queued' journal row; jobs whose
-- idempotency_key already exists (or repeats an earlier job of the batch) are skipped.
-- Parameters as in insert_jobs_rows.sql ($1 the ids, all given; $2..$12 the columns as arrays,
-- $16..$26 their fills; $13 producer, $14 request id, $15 traceparent). $4 (args) is JSON text per
-- job, so the statement also runs on a caller's connection that has no jsonb codec of ours.
-- Returns the inserted job ids in input order (the order of $1).
WITH inserted AS (
-- @include insert_jobs_rows
    ON CONFLICT (idempotency_key) DO NOTHING
    RETURNING job_id, queue, task, request_id
), journal AS (
-- @include insert_jobs_journal
)
SELECT i.job_id FROM unnest($1::uuid[]) WITH ORDINALITY AS i(job_id, n) JOIN inserted USING (job_id) ORDER BY i.n;
