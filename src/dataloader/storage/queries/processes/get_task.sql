-- One process task with its job's live state (attempt, job status; NULL once the job was pruned).
-- $1 task_id.
SELECT t.task_id, t.ns, t.process_id, t.task_type, t.args, t.history_range, t.idempotency_key, t.status,
       t.response, t.error, t.scheduled_at, t.created_at, t.finished_at, t.restart_of,
       j.status::text AS job_status, j.attempt, j.started_at
FROM dl_process_tasks t
LEFT JOIN dl_jobs j ON j.job_id = t.task_id
WHERE t.task_id = $1
