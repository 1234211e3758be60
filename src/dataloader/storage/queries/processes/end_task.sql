-- End a task without touching its process (a step that finds nothing to do: the process is not
-- in a status the task applies to, or its timer was superseded), with the NOTIFY for its caller.
-- $1 task id, $2 status ('error' | 'cancelled'), $3 error text, $4 response (JSON text or NULL:
-- `{"wrong_status": s}` tells the caller the process was in status s, a 409 like at the API).
WITH task AS (
    UPDATE dl_process_tasks
    SET status = $2, error = $3, response = $4::text::jsonb, finished_at = now()
    WHERE task_id = $1::uuid AND status = 'waiting'
    RETURNING task_id
), notified AS (
    SELECT pg_notify('dl_process_task', $1::uuid::text)
)
SELECT (SELECT count(*) FROM task) AS ended, (SELECT count(*) FROM notified) AS notified
