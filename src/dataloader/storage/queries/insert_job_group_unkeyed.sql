-- insert_job_group.sql for a group where no call has an idempotency key: no ON CONFLICT (see
-- insert_job_unkeyed.sql); every row is inserted. Parameters and answer as in insert_job_group.sql.
WITH
-- @include insert_job_group_rows
    RETURNING job_id, queue, task, args, available_at, created_at, chain_next, request_id
-- @include insert_job_answer
