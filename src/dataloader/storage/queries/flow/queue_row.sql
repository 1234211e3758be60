-- One queue's flow row (pause, limits, fair share), for the answer of a change of its limits. An operator
-- read by primary key. No row: the queue has no flow state (open, no limit).
-- $1 queue.
SELECT f.queue, f.paused, f.paused_at, f.concurrency, f.partition_concurrency, f.rate_limit, f.rate_period_sec,
       f.partition_rate_limit, f.partition_rate_period_sec, f.settings_source, f.fair_share, f.fair_weights
FROM dl_queue_flow f
WHERE f.queue = $1;
