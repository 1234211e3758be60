-- The task an idempotency key names in a namespace (ux_dl_process_tasks_idempotency). $1 ns, $2 key.
SELECT t.task_id, t.ns, t.process_id, t.task_type, t.args, t.history_range, t.idempotency_key, t.status,
       t.response, t.error, t.scheduled_at, t.created_at, t.finished_at, t.restart_of,
       j.status::text AS job_status, j.attempt, j.started_at
FROM dl_process_tasks t
LEFT JOIN dl_jobs j ON j.job_id = t.task_id
WHERE t.ns = $1 AND t.idempotency_key = $2
