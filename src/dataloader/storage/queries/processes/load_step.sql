-- What a step needs before it runs its processor: the task and its process (one join, no lock:
-- the process's lock_key already makes this the only step of the process; the write at the end
-- checks `version`, so an API change made meanwhile is never overwritten). $1 task_id.
SELECT t.task_id, t.task_type, t.args, t.history_range, t.idempotency_key, t.status AS task_status,
       p.ns, p.id, p.status, p.detail, p.aux_state, p.aux_state_bytes, p.metadata, p.corrupted_by,
       p.previous_status, p.status_changed_at, p.created_at, p.version, p.last_event_id, p.timer_task_id,
       p.timer_type, p.timer_at
FROM dl_process_tasks t
JOIN dl_processes p ON p.ns = t.ns AND p.id = t.process_id
WHERE t.task_id = $1
