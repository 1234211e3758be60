-- The 'queued' journal rows of a batch enqueue's `inserted` rows (insert_jobs_batch.sql,
-- insert_jobs_batch_unkeyed.sql), in the same statement (promise 4). The payload names the task,
-- and the HTTP request id (the rows' own request_id) when there is one, as a single trigger's row
-- does; the two branches build that object without jsonb_strip_nulls' second pass over it.
-- No parameters.
INSERT INTO dl_job_events (job_id, queue, kind, payload)
SELECT job_id, queue, 'queued',
       CASE WHEN request_id IS NULL THEN jsonb_build_object('task', task)
            ELSE jsonb_build_object('task', task, 'request_id', request_id) END
FROM inserted
