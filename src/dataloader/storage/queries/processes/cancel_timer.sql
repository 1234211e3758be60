-- Disarm a process timer: its queued job is canceled (journal row 'canceled' with $2 as reason)
-- and its task marked cancelled, in the caller's transaction. $1 the timer's task/job id. A job
-- that is no longer queued (it runs: it is the caller's own step) is left alone.
WITH job AS (
    UPDATE dl_jobs
    SET status = 'canceled', error = $2, finished_at = now()
    WHERE job_id = $1 AND status = 'queued'
    RETURNING job_id, queue
), journal AS (
    INSERT INTO dl_job_events (job_id, queue, kind, payload)
    SELECT job_id, queue, 'canceled', jsonb_build_object('reason', $2::text)
    FROM job
), task AS (
    UPDATE dl_process_tasks
    SET status = 'cancelled', finished_at = now()
    WHERE task_id = $1 AND status = 'waiting' AND EXISTS (SELECT 1 FROM job)
    RETURNING task_id
)
SELECT (SELECT count(*) FROM job) AS canceled
