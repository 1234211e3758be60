-- A page of a process's history, newest first: events before $3 (0: from the last), at most $4
-- (NULL: all). $1 ns, $2 process id. The primary key read backwards.
SELECT event_id, ts, payload, metadata, task_id
FROM dl_process_events
WHERE ns = $1 AND process_id = $2 AND ($3 = 0 OR event_id < $3)
ORDER BY event_id DESC
LIMIT $4
