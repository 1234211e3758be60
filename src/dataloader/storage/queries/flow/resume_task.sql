-- Resume task $2 of queue $1 and wake the queue's workers on every node (NOTIFY dl_jobs with the
-- queue's name, the enqueue's wake-up): a worker whose claims found only the paused task's jobs
-- sleeps until a notification. Idempotent; a task never paused gets no row and no wake-up.
-- $1 queue, $2 task.
WITH changed AS (
    UPDATE dl_task_flow
    SET paused = false, paused_at = NULL, updated_at = now()
    WHERE queue = $1 AND task = $2 AND paused
    RETURNING queue, task
)
SELECT c.queue, c.task, pg_notify('dl_jobs', c.queue) IS NULL AS signaled FROM changed c;
