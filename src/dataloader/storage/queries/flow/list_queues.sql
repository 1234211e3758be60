-- Every queue with flow state (its own row, 0019/0022/0024, or a paused task's, 0025) or live jobs:
-- paused or not, its limits (0022), fair share (0024), its paused tasks (0025), and its current
-- use (running and queued jobs, all nodes). An operator read (GET /api/v1/queues, `dataloader
-- queues list`), not a hot path: the counts come from the partial indexes of queued and running
-- jobs; the flow tables hold a row per queue or task an operator ever configured.
-- No parameters.
WITH use AS (
    SELECT queue,
           count(*) FILTER (WHERE status = 'running') AS running,
           count(*) FILTER (WHERE status = 'queued') AS queued
    FROM dl_jobs
    WHERE status IN ('queued', 'running')
    GROUP BY queue
), named AS (
    SELECT queue FROM dl_queue_flow
    UNION SELECT queue FROM dl_task_flow
    UNION SELECT queue FROM use
)
SELECT n.queue,
       COALESCE(f.paused, false) AS paused,
       f.paused_at,
       f.concurrency, f.partition_concurrency, f.rate_limit, f.rate_period_sec, f.partition_rate_limit,
       f.partition_rate_period_sec, f.settings_source,
       COALESCE(f.fair_share, false) AS fair_share,
       f.fair_weights,
       COALESCE(u.running, 0)::bigint AS running,
       COALESCE(u.queued, 0)::bigint AS queued,
       ARRAY(SELECT t.task FROM dl_task_flow t WHERE t.queue = n.queue AND t.paused ORDER BY t.task) AS paused_tasks,
       ARRAY(SELECT t.paused_at FROM dl_task_flow t WHERE t.queue = n.queue AND t.paused ORDER BY t.task)
           AS tasks_paused_at
FROM named n
LEFT JOIN dl_queue_flow f ON f.queue = n.queue
LEFT JOIN use u ON u.queue = n.queue
ORDER BY 1;
