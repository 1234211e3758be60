-- Apply the limits a node declares for task $2 in queue $1 (`@pipeline(..., limits={...})`, for each
-- queue the node's workers serve) unless they were set at run time: a 'runtime' row is left alone.
-- Returns whether a row changed. The caller has locked the queue's row first (lock order, see
-- lock_task_settings.sql) and writes the queue's task_limited flag after (task_limited.sql).
-- A declaration without a rate that replaced one takes the window's starts with it (see
-- set_task_settings.sql).
-- $1 queue, $2 task, $3 concurrency, $4 rate_limit, $5 rate_period_sec.
WITH applied AS (
    INSERT INTO dl_task_flow AS t (queue, task, concurrency, rate_limit, rate_period_sec, settings_source)
    VALUES ($1, $2, $3, $4, $5, 'declared')
    ON CONFLICT (queue, task) DO UPDATE
    SET concurrency = EXCLUDED.concurrency, rate_limit = EXCLUDED.rate_limit,
        rate_period_sec = EXCLUDED.rate_period_sec, settings_source = 'declared', updated_at = now()
    WHERE t.settings_source IS DISTINCT FROM 'runtime'
      AND (t.concurrency, t.rate_limit, t.rate_period_sec, t.settings_source)
          IS DISTINCT FROM (EXCLUDED.concurrency, EXCLUDED.rate_limit, EXCLUDED.rate_period_sec, 'declared')
    RETURNING t.task
), cleared_starts AS (
    DELETE FROM dl_task_starts s
    WHERE s.queue = $1 AND s.task = $2 AND $4::integer IS NULL AND EXISTS (SELECT 1 FROM applied)
)
SELECT count(*) > 0 AS applied FROM applied;
