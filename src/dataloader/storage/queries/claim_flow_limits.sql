-- The flow columns of a limited or fair claim's `flow` row, read from dl_queue_flow `f` for queue $1
-- (claim_limited_jobs.sql, claim_jobs_fair.sql): whether the queue is limited (by its own limits or
-- its tasks'), whether a finish frees a slot, and what is full in this snapshot: the limited tasks
-- at their limit (0027), the queue itself, its partition keys. The walk passes the full ones over;
-- the gate decides. Rate windows end at statement_timestamp(): in a step's transaction, now() is
-- the transaction's start and would leave out the starts of its own earlier statements.
           f.concurrency IS NOT NULL OR f.partition_concurrency IS NOT NULL OR f.rate_limit IS NOT NULL
               OR f.partition_rate_limit IS NOT NULL OR f.task_limited AS limited,
           -- limits of the queue's own (not only its tasks'): the gate locks its row at once
           f.concurrency IS NOT NULL OR f.partition_concurrency IS NOT NULL OR f.rate_limit IS NOT NULL
               OR f.partition_rate_limit IS NOT NULL AS queue_limited,
           -- a finish frees a slot here: the worker wakes the queue's other workers after it
           f.concurrency IS NOT NULL OR f.partition_concurrency IS NOT NULL OR f.task_limited AS frees_on_finish,
           -- the queue's limited tasks at their limit in this snapshot (0027; task_limited on the row
           -- gates the read): the walk passes their jobs over, the gate decides
           CASE WHEN f.task_limited THEN ARRAY(
               SELECT t.task FROM dl_task_flow t
               WHERE t.queue = $1
                 AND (COALESCE(t.concurrency <= (SELECT count(*) FROM dl_jobs r
                                                 WHERE r.queue = $1 AND r.task = t.task AND r.status = 'running'), false)
                      OR COALESCE(t.rate_limit <= (SELECT count(*) FROM dl_task_starts s
                                                   WHERE s.queue = $1 AND s.task = t.task
                                                     AND s.started_at <= statement_timestamp()
                                                     AND s.started_at > statement_timestamp()
                                                         - make_interval(secs => t.rate_period_sec)), false)))
           END AS full_tasks,
           COALESCE(CASE WHEN f.concurrency IS NOT NULL THEN
                        (SELECT count(*) FROM dl_jobs r WHERE r.queue = $1 AND r.status = 'running') >= f.concurrency
                    END, false)
           OR COALESCE(CASE WHEN f.rate_limit IS NOT NULL THEN
                        (SELECT count(*) FROM dl_flow_starts s
                         WHERE s.queue = $1 AND s.started_at <= statement_timestamp()
                           AND s.started_at > statement_timestamp() - make_interval(secs => f.rate_period_sec)) >= f.rate_limit
                    END, false) AS full,
           CASE WHEN f.partition_concurrency IS NOT NULL OR f.partition_rate_limit IS NOT NULL THEN ARRAY(
               SELECT r.partition_key FROM dl_jobs r
               WHERE r.queue = $1 AND r.status = 'running' AND f.partition_concurrency IS NOT NULL
               GROUP BY r.partition_key HAVING count(*) >= f.partition_concurrency
               UNION
               SELECT s.partition_key FROM dl_flow_starts s
               WHERE s.queue = $1 AND f.partition_rate_limit IS NOT NULL AND s.started_at <= statement_timestamp()
                 AND s.started_at > statement_timestamp() - make_interval(secs => f.partition_rate_period_sec)
               GROUP BY s.partition_key HAVING count(*) >= f.partition_rate_limit)
           END AS full_partitions
