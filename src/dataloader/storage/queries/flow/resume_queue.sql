-- Resume queue $1 and wake its workers on every node (NOTIFY dl_jobs with the queue's name, the
-- enqueue's wake-up): a worker that found the queue paused sleeps until a notification, so the
-- resume must send one. Idempotent; a queue that was never paused gets no row and no wake-up.
-- Returns the queue's flow row (none when the queue has no flow state).
-- $1 queue.
WITH changed AS (
    UPDATE dl_queue_flow
    SET paused = false, paused_at = NULL, updated_at = now()
    WHERE queue = $1
    RETURNING queue, paused, paused_at, updated_at, concurrency, partition_concurrency, rate_limit, rate_period_sec,
              partition_rate_limit, partition_rate_period_sec, settings_source, fair_share, fair_weights
), signal AS (
    SELECT pg_notify('dl_jobs', c.queue) FROM changed c
)
SELECT c.queue, c.paused, c.paused_at, c.updated_at, c.concurrency, c.partition_concurrency, c.rate_limit,
       c.rate_period_sec, c.partition_rate_limit, c.partition_rate_period_sec, c.settings_source, c.fair_share,
       c.fair_weights, (SELECT count(*) FROM signal) AS signaled
FROM changed c;
