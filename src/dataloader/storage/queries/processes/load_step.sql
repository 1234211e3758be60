-- What a step needs before it runs its processor, in one round trip: the task and its process (no
-- lock: the process's lock_key already makes this the only step of the process; the write at the
-- end checks `version`, so an API change made meanwhile is never overwritten), whether a call or
-- repair of the process waits in the queue (a timer steps aside behind it: $2 its lock_key, $3 the
-- caller priority), and, when the task asks for no history range, the whole history as one JSON
-- array (otherwise NULL and the step reads its range with events_forward/backward.sql). $1 task_id.
SELECT t.task_id, t.task_type, t.args, t.history_range, t.idempotency_key, t.status AS task_status,
       p.ns, p.id, p.status, p.detail, p.aux_state, p.aux_state_bytes, p.metadata, p.corrupted_by,
       p.previous_status, p.status_changed_at, p.created_at, p.version, p.last_event_id, p.timer_task_id,
       p.timer_type, p.timer_at,
       t.task_type IN ('timeout', 'remove') AND EXISTS (
           SELECT 1 FROM dl_jobs j
           WHERE j.lock_key = $2 AND (j.status IN ('queued', 'running')) IS TRUE AND NOT COALESCE(j.status = 'running', false)
             AND j.priority <= $3 AND j.job_id <> t.task_id
       ) AS caller_pending,
       CASE WHEN t.history_range IS NULL THEN (
           SELECT COALESCE(jsonb_agg(jsonb_build_array(e.event_id, e.ts, e.payload, e.metadata, e.task_id)
                                     ORDER BY e.event_id), '[]'::jsonb)
           FROM dl_process_events e
           WHERE e.ns = p.ns AND e.process_id = p.id
       ) END AS history
FROM dl_process_tasks t
JOIN dl_processes p ON p.ns = t.ns AND p.id = t.process_id
-- The process through its key, whatever the planner thinks of the tables' sizes (storage/db.py
-- SESSION_SETTINGS): a join it could order either way could read dl_processes whole.
WHERE t.task_id = $1
  AND (p.ns, p.id) = (SELECT s.ns, s.process_id FROM dl_process_tasks s WHERE s.task_id = $1)
