-- The tasks with limits of their own (0027) and their use now on all nodes: running jobs of the
-- task in its queue, runnable ones (queued, due, not parked), and its starts in its rate's window
-- (dl_task_starts' (queue, task, started_at) index). For queue $1, or every queue when $1 is NULL.
-- An operator read (GET /api/v1/queues, the console, the dl_task_* gauges at scrape time): few
-- rows, one per limited task; the counts come from the partial indexes of queued and running jobs.
-- $1 queue (NULL: all).
SELECT t.queue, t.task, t.concurrency, t.rate_limit, t.rate_period_sec, t.settings_source,
       (SELECT count(*) FROM dl_jobs r
        WHERE r.status = 'running' AND r.queue = t.queue AND r.task = t.task)::bigint AS running,
       (SELECT count(*) FROM dl_jobs q
        WHERE q.status = 'queued' AND q.queue = t.queue AND q.task = t.task AND q.available_at <= now()
          AND NOT q.key_parked)::bigint AS runnable,
       (SELECT count(*) FROM dl_task_starts s
        WHERE s.queue = t.queue AND s.task = t.task AND t.rate_limit IS NOT NULL
          AND s.started_at <= statement_timestamp()
          AND s.started_at > statement_timestamp() - make_interval(secs => t.rate_period_sec))::bigint AS starts
FROM dl_task_flow t
WHERE ($1::text IS NULL OR t.queue = $1::text) AND (t.concurrency IS NOT NULL OR t.rate_limit IS NOT NULL)
ORDER BY t.queue, t.task;
