-- The flow row of task $2 of queue $1 (0025/0027), locked for a change of its limits
-- (configure_task, HTTP PATCH .../tasks/{task}, CLI `queues set --task`): the caller has locked the
-- queue's row first (lock_queue_settings.sql: every claim's gate takes the queue's row before its
-- tasks' rows, so this order cannot deadlock with one), merges the change into what this returns and
-- writes it back with set_task_settings.sql in the same transaction. A task with no row gets one.
-- $1 queue, $2 task.
INSERT INTO dl_task_flow AS t (queue, task)
VALUES ($1, $2)
ON CONFLICT (queue, task) DO UPDATE SET task = EXCLUDED.task
RETURNING t.concurrency, t.rate_limit, t.rate_period_sec, t.settings_source;
