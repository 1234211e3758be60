-- A page of a process's history, oldest first: events after $3 (0: from the first), at most $4
-- (NULL: all). $1 ns, $2 process id. Served by the primary key (ns, process_id, event_id).
SELECT event_id, ts, payload, metadata, task_id
FROM dl_process_events
WHERE ns = $1 AND process_id = $2 AND event_id > $3
ORDER BY event_id
LIMIT $4
