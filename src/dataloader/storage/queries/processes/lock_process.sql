-- One process, row-locked for the rest of the caller's transaction: an API change (call, repair,
-- simple repair) checks the status and writes in the same transaction as this lock, so a step
-- that finishes meanwhile cannot slip in between. $1 ns, $2 id.
SELECT ns, id, status, detail, aux_state, aux_state_bytes, metadata, corrupted_by, previous_status,
       status_changed_at, created_at, version, last_event_id, timer_task_id, timer_type, timer_at
FROM dl_processes
WHERE ns = $1 AND id = $2
FOR UPDATE
