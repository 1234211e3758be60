-- Write the limits of task $2 of queue $1, set at run time (they win over declarations at a node's
-- start). The row exists and is locked (lock_task_settings.sql, same transaction); the queue's
-- task_limited flag is written next (task_limited.sql), and every claim that starts after the commit
-- reads both (the claims read the rows in their own snapshot, the gate in a fresh one).
-- A rate cleared takes its window's starts with it: the gate prunes a task's dl_task_starts only
-- while the task has a rate, so they would stay forever (a rate set again starts a fresh window).
-- $1 queue, $2 task, $3 concurrency, $4 rate_limit, $5 rate_period_sec (NULL: no such limit).
WITH cleared_starts AS (
    DELETE FROM dl_task_starts
    WHERE queue = $1 AND task = $2 AND $4::integer IS NULL
)
UPDATE dl_task_flow
SET concurrency = $3, rate_limit = $4, rate_period_sec = $5, settings_source = 'runtime', updated_at = now()
WHERE queue = $1 AND task = $2;
