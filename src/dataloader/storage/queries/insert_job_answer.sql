-- The end of an enqueue's statement (insert_job.sql, insert_job_unkeyed.sql, insert_job_group.sql,
-- insert_job_group_unkeyed.sql), right after their `inserted` CTE's RETURNING: each inserted row's
-- 'queued' journal row, in the same statement (promise 4), naming the task and the HTTP request id
-- when there is one (the row's own request_id: one payload object per row, no jsonb_strip_nulls
-- pass over it), and the answer: only what the database decided (repositories.inserted_job builds
-- the Job from it and the request). The empty object, the commonest args, comes back as NULL:
-- nothing to decode. No parameters.
), journal AS (
    INSERT INTO dl_job_events (job_id, queue, kind, payload)
    SELECT job_id, queue, 'queued',
           CASE WHEN request_id IS NULL THEN jsonb_build_object('task', task)
                ELSE jsonb_build_object('task', task, 'request_id', request_id) END
    FROM inserted
)
SELECT job_id, NULLIF(args, '{}'::jsonb) AS args, available_at, created_at, chain_next FROM inserted;
