-- Apply the limits a node declares for queue $1 at its start (`Queue(limits=...)`, DL_QUEUES_JSON),
-- unless they were set at run time: a runtime change (settings_source 'runtime') wins and persists
-- across restarts, so a node restarting with its old declarations never undoes an operator's
-- change. Wakes the queue's workers when something changed (a limit raised or cleared).
-- $1 queue, $2 concurrency, $3 partition_concurrency, $4 rate_limit, $5 rate_period_sec,
-- $6 partition_rate_limit, $7 partition_rate_period_sec (NULL: no such limit), $8 fair_share, $9
-- fair_weights (0024).
-- Returns whether the declaration was applied (false: a runtime setting kept).
WITH applied AS (
    INSERT INTO dl_queue_flow AS f (queue, concurrency, partition_concurrency, rate_limit, rate_period_sec,
                                    partition_rate_limit, partition_rate_period_sec, fair_share, fair_weights,
                                    settings_source)
    VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9::jsonb, 'declared')
    ON CONFLICT (queue) DO UPDATE
    SET concurrency = EXCLUDED.concurrency, partition_concurrency = EXCLUDED.partition_concurrency,
        rate_limit = EXCLUDED.rate_limit, rate_period_sec = EXCLUDED.rate_period_sec,
        partition_rate_limit = EXCLUDED.partition_rate_limit,
        partition_rate_period_sec = EXCLUDED.partition_rate_period_sec, fair_share = EXCLUDED.fair_share,
        fair_weights = EXCLUDED.fair_weights, settings_source = 'declared',
        updated_at = now()
    WHERE f.settings_source IS DISTINCT FROM 'runtime'
      AND (f.concurrency, f.partition_concurrency, f.rate_limit, f.rate_period_sec, f.partition_rate_limit,
           f.partition_rate_period_sec, f.fair_share, f.fair_weights, f.settings_source)
          IS DISTINCT FROM (EXCLUDED.concurrency, EXCLUDED.partition_concurrency, EXCLUDED.rate_limit,
                            EXCLUDED.rate_period_sec, EXCLUDED.partition_rate_limit,
                            EXCLUDED.partition_rate_period_sec, EXCLUDED.fair_share, EXCLUDED.fair_weights,
                            'declared')
    RETURNING f.queue
), signal AS (
    SELECT pg_notify('dl_jobs', a.queue) FROM applied a
)
SELECT (SELECT count(*) FROM signal) > 0 AS applied;
