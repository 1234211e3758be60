-- A job's journal: the events of job $1 after event id $2 (0: from the start), oldest first,
-- at most $3.
SELECT event_id, job_id, queue, ts, kind, payload
FROM dl_job_events
WHERE job_id = $1 AND event_id > $2
ORDER BY event_id
LIMIT $3;
