-- Remove a process and all its rows (events and tasks by cascade), cancel its queued jobs (with
-- their journal rows), write the feed's 'remove' row and wake callers waiting on its tasks, in one
-- statement. $1 ns, $2 id, $3 its lock_key, $4 the remove task (NULL: removed through the API).
-- A running step of the process finds it gone at its write (version check) and writes nothing.
WITH waiting AS (
    SELECT task_id FROM dl_process_tasks
    WHERE ns = $1 AND process_id = $2 AND status = 'waiting'
), jobs AS (
    UPDATE dl_jobs
    SET status = 'canceled', error = 'process removed', finished_at = now()
    WHERE lock_key = $3 AND (status IN ('queued', 'running')) IS TRUE AND NOT COALESCE(status = 'running', false)
    RETURNING job_id, queue
), journal AS (
    INSERT INTO dl_job_events (job_id, queue, kind, payload)
    SELECT job_id, queue, 'canceled', jsonb_build_object('reason', 'process removed')
    FROM jobs
), proc AS (
    DELETE FROM dl_processes WHERE ns = $1 AND id = $2
    RETURNING ns, id
), feed AS (
    INSERT INTO dl_process_feed (ns, process_id, kind, task_id)
    SELECT ns, id, 'remove', $4::uuid FROM proc
), notified AS (
    SELECT pg_notify('dl_process_task', w.task_id::text) FROM waiting w
    UNION ALL
    SELECT pg_notify('dl_process_feed', $1) FROM proc
)
SELECT (SELECT count(*) FROM proc) AS removed, (SELECT count(*) FROM jobs) AS canceled_jobs,
       (SELECT count(*) FROM notified) AS woken
