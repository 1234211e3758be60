-- The task an idempotency key names in a namespace (ux_dl_process_tasks_idempotency). $1 ns, $2 key.
SELECT t.task_id, t.ns, t.process_id, t.task_type, t.args, t.history_range, t.idempotency_key, t.status,
       t.response, t.error, t.scheduled_at, t.created_at, t.finished_at, t.restart_of,
       j.status::text AS job_status, j.attempt, j.started_at
-- The task through its key alone (LIMIT 1 keeps it a subquery), so no plan can reach it by walking
-- dl_process_tasks in some other index's order (storage/db.py SESSION_SETTINGS).
FROM (SELECT * FROM dl_process_tasks WHERE ns = $1 AND idempotency_key = $2 LIMIT 1) t
LEFT JOIN LATERAL (SELECT * FROM dl_jobs WHERE job_id = t.task_id LIMIT 1) j ON true
