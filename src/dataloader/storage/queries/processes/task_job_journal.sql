-- The 'queued' journal row of a process task's job (insert_task.sql, enqueue_caller.sql include it
-- after their `job` CTE, the dl_jobs row they insert: job_id, queue, request_id), written in the
-- statement that inserts the job. No parameters.
journal AS (
    INSERT INTO dl_job_events (job_id, queue, kind, payload)
    SELECT job_id, queue, 'queued', jsonb_strip_nulls(jsonb_build_object('task', 'dl.process', 'request_id', request_id))
    FROM job
)
