-- The flow row of queue $1, locked for a change of its limits (configure_queue, HTTP PATCH, CLI
-- `queues set`): the caller merges the change into what it returns and writes it back with
-- set_queue_settings.sql in the same transaction, so two concurrent partial changes compose
-- instead of one overwriting the other. A queue with no row gets one (ON CONFLICT DO UPDATE locks
-- an existing row and returns it, an INSERT returns the new one): a missing row cannot be locked.
-- $1 queue.
INSERT INTO dl_queue_flow AS f (queue)
VALUES ($1)
ON CONFLICT (queue) DO UPDATE SET queue = EXCLUDED.queue
RETURNING f.concurrency, f.partition_concurrency, f.rate_limit, f.rate_period_sec, f.partition_rate_limit,
          f.partition_rate_period_sec, f.settings_source, f.fair_share, f.fair_weights;
