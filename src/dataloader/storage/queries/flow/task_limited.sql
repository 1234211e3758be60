-- Write queue $1's task_limited flag (0027) from its tasks' rows, in the transaction that changed a
-- task's limits, and wake the queue's workers on every node (NOTIFY dl_jobs with the queue's name):
-- a worker whose claim a task's limit held back sleeps until a hint, and one claiming with the plain
-- claim_jobs.sql must learn (next_due_in.sql) that the queue now has a limited task. The queue's row
-- exists and is locked (lock_queue_settings.sql). Returns the flag.
-- $1 queue.
WITH changed AS (
    UPDATE dl_queue_flow f
    SET task_limited = EXISTS (SELECT 1 FROM dl_task_flow t
                               WHERE t.queue = $1 AND (t.concurrency IS NOT NULL OR t.rate_limit IS NOT NULL)),
        updated_at = now()
    WHERE f.queue = $1
    RETURNING f.queue, f.task_limited
), signal AS (
    SELECT pg_notify('dl_jobs', c.queue) FROM changed c
)
SELECT c.task_limited, (SELECT count(*) FROM signal) AS signaled FROM changed c;
