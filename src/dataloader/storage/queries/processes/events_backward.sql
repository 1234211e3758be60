-- A page of a process's history, newest first: events before $3 (0: from the last), at most $4
-- (NULL: all). $1 ns, $2 process id. The primary key read backwards. $3 is a bigint as event_id is
-- (`$3 = 0` alone would make it an int4, and an offset past 2^31 a driver error).
SELECT event_id, ts, payload, metadata, task_id
FROM dl_process_events
WHERE ns = $1 AND process_id = $2 AND ($3::bigint = 0 OR event_id < $3::bigint)
ORDER BY event_id DESC
LIMIT $4
