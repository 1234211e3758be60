-- Processes of namespace $1, by id, after id $3 (NULL: from the first), at most $4, optionally of
-- status $2 (NULL: any). Keyset paging on the primary key / ix_dl_processes_status.
SELECT ns, id, status, detail, aux_state, aux_state_bytes, metadata, corrupted_by, previous_status,
       status_changed_at, created_at, version, last_event_id, timer_task_id, timer_type, timer_at
FROM dl_processes
WHERE ns = $1 AND ($2::text IS NULL OR status = $2) AND ($3::text IS NULL OR id > $3)
ORDER BY id
LIMIT $4
