-- The task a restart goes back to, with the state it found (state_before, 0016), chosen by:
-- $3 a task id, or $4 an event id (the task that wrote it), or, both NULL, the process's first
-- init task. $1 ns, $2 id. `event_found` tells an unknown event from an imported one (no task).
WITH by_event AS (
    SELECT e.task_id FROM dl_process_events e
    WHERE e.ns = $1 AND e.process_id = $2 AND e.event_id = $4::bigint
), chosen AS (
    SELECT t.task_id, t.task_type, t.args, t.history_range, t.status, t.state_before, t.finished_at,
           t.created_at
    FROM dl_process_tasks t
    WHERE t.ns = $1 AND t.process_id = $2
      AND CASE WHEN $3::uuid IS NOT NULL THEN t.task_id = $3::uuid
               WHEN $4::bigint IS NOT NULL THEN t.task_id = (SELECT task_id FROM by_event)
               ELSE t.task_type = 'init' END
    ORDER BY t.created_at, t.task_id
    LIMIT 1
)
SELECT (SELECT count(*) FROM by_event) > 0 AS event_found, c.*
FROM (SELECT 1) one LEFT JOIN chosen c ON true
