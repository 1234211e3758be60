-- Write the limits of task $2 of queue $1, set at run time (they win over declarations at a node's
-- start). The row exists and is locked (lock_task_settings.sql, same transaction); the queue's
-- task_limited flag is written next (task_limited.sql), and every claim that starts after the commit
-- reads both (the claims read the rows in their own snapshot, the gate in a fresh one).
-- $1 queue, $2 task, $3 concurrency, $4 rate_limit, $5 rate_period_sec (NULL: no such limit).
UPDATE dl_task_flow
SET concurrency = $3, rate_limit = $4, rate_period_sec = $5, settings_source = 'runtime', updated_at = now()
WHERE queue = $1 AND task = $2;
