-- The trace of a process: every task, oldest first, with its job's live state (attempts, job
-- status; NULL once the pruner deleted the job). $1 ns, $2 process id.
SELECT t.task_id, t.ns, t.process_id, t.task_type, t.args, t.history_range, t.idempotency_key, t.status,
       t.response, t.error, t.scheduled_at, t.created_at, t.finished_at, t.restart_of,
       j.status::text AS job_status, j.attempt, j.started_at
FROM dl_process_tasks t
LEFT JOIN dl_jobs j ON j.job_id = t.task_id
WHERE t.ns = $1 AND t.process_id = $2
ORDER BY t.created_at, t.scheduled_at, t.task_id
