-- The start of a restart, after it took the process's lock_key (restart_key.sql): the process
-- row-locked, and whether a caller's task (init, call, repair) waits in the queue. $1 ns, $2 id.
SELECT p.ns, p.id, p.status, p.detail, p.aux_state, p.aux_state_bytes, p.metadata, p.corrupted_by,
       p.previous_status, p.status_changed_at, p.created_at, p.version, p.last_event_id, p.timer_task_id,
       p.timer_type, p.timer_at,
       EXISTS (SELECT 1 FROM dl_process_tasks t
               WHERE t.ns = p.ns AND t.process_id = p.id AND t.status = 'waiting'
                 AND t.task_type IN ('init', 'call', 'repair')) AS caller_waiting
FROM dl_processes p
WHERE p.ns = $1 AND p.id = $2
FOR UPDATE
