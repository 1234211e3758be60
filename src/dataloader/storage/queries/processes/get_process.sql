-- One process without its history. $1 ns, $2 id.
SELECT ns, id, status, detail, aux_state, aux_state_bytes, metadata, corrupted_by, previous_status,
       status_changed_at, created_at, version, last_event_id, timer_task_id, timer_type, timer_at
FROM dl_processes
WHERE ns = $1 AND id = $2
