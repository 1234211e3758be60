-- What a consistency check (processes/consistency.py) decides from, for a page of a namespace's
-- processes in id order after $2 (NULL: from the start), at most $3; or, with $4, for that one
-- process only (a repair re-reads it under its lock). $1 ns. One snapshot, so the process row and
-- its tasks and jobs are read as of the same instant.
WITH page AS (
    SELECT p.*
    FROM dl_processes p
    WHERE p.ns = $1
      AND ($4::text IS NULL OR p.id = $4::text)
      AND ($2::text IS NULL OR p.id > $2::text)
    ORDER BY p.id
    LIMIT $3
)
SELECT pg.id, pg.status, pg.version, pg.detail, pg.corrupted_by, pg.last_event_id, pg.updated_at,
       pg.timer_task_id, pg.timer_type, pg.timer_at,
       (SELECT j.status::text FROM dl_jobs j WHERE j.job_id = pg.timer_task_id) AS timer_job_status,
       (SELECT max(e.event_id) FROM dl_process_events e
        WHERE e.ns = pg.ns AND e.process_id = pg.id) AS max_event_id,
       (SELECT t.task_id FROM dl_process_tasks t WHERE t.task_id = pg.corrupted_by) IS NOT NULL AS cause_known,
       (SELECT t.task_id FROM dl_process_tasks t
        WHERE t.ns = pg.ns AND t.process_id = pg.id AND t.task_type = 'init'
        ORDER BY t.created_at, t.task_id LIMIT 1) AS init_task_id,
       (SELECT COALESCE(jsonb_agg(jsonb_build_object('task_id', t.task_id, 'type', t.task_type,
                                                     'job_status', j.status::text)
                                  ORDER BY t.created_at, t.task_id), '[]'::jsonb)
        FROM dl_process_tasks t LEFT JOIN dl_jobs j ON j.job_id = t.task_id
        WHERE t.ns = pg.ns AND t.process_id = pg.id AND t.status = 'waiting') AS waiting_tasks
FROM page pg
ORDER BY pg.id
