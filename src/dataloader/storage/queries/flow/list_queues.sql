-- Every queue with flow state or live jobs: paused or not, its limits (0022), and its current use
-- (running and queued jobs, all nodes). An operator read (GET /api/v1/queues, `dataloader queues list`), not a
-- hot path: the counts come from the partial indexes of queued and running jobs.
-- No parameters.
WITH use AS (
    SELECT queue,
           count(*) FILTER (WHERE status = 'running') AS running,
           count(*) FILTER (WHERE status = 'queued') AS queued
    FROM dl_jobs
    WHERE status IN ('queued', 'running')
    GROUP BY queue
)
SELECT COALESCE(f.queue, u.queue) AS queue,
       COALESCE(f.paused, false) AS paused,
       f.paused_at,
       f.concurrency, f.partition_concurrency, f.rate_limit, f.rate_period_sec, f.partition_rate_limit,
       f.partition_rate_period_sec, f.settings_source,
       COALESCE(u.running, 0)::bigint AS running,
       COALESCE(u.queued, 0)::bigint AS queued
FROM dl_queue_flow f
FULL JOIN use u ON u.queue = f.queue
ORDER BY 1;
