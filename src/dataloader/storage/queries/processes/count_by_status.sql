-- Processes per namespace and status (the dl_processes gauge), and of the running ones how many
-- are idle (dl_processes_idle): no timer armed, no task waiting, unchanged for $1 seconds (0: none
-- counted). One pass over the table per scrape.
SELECT p.ns, p.status, count(*) AS processes,
       count(*) FILTER (
           WHERE $1::float8 > 0 AND p.status = 'running' AND p.timer_task_id IS NULL
             AND p.updated_at < now() - make_interval(secs => $1::float8)
             AND NOT EXISTS (SELECT 1 FROM dl_process_tasks t
                             WHERE t.ns = p.ns AND t.process_id = p.id AND t.status = 'waiting')
       ) AS idle
FROM dl_processes p
GROUP BY p.ns, p.status
