-- Write queue $1's limits, set at run time (they win over declarations at a node's start), and
-- wake its workers on every node (NOTIFY dl_jobs with the queue's name, the enqueue's wake-up):
-- a worker holding jobs back by a limit that was just raised or cleared sleeps until a hint.
-- The row exists and is locked (lock_queue_settings.sql, same transaction). Every claim that starts
-- after the commit reads the new limits (claim_jobs.sql reads the row in its own snapshot).
-- $1 queue, $2 concurrency, $3 partition_concurrency, $4 rate_limit, $5 rate_period_sec,
-- $6 partition_rate_limit, $7 partition_rate_period_sec (NULL: no such limit), $8 fair_share, $9
-- fair_weights (0024; partition_key -> weight, NULL: every key weighs 1). A change of fair share
-- holds from the commit on too: each claim statement gates on fair_share (claim_jobs_fair.sql).
WITH changed AS (
    UPDATE dl_queue_flow
    SET concurrency = $2, partition_concurrency = $3, rate_limit = $4, rate_period_sec = $5,
        partition_rate_limit = $6, partition_rate_period_sec = $7, fair_share = $8, fair_weights = $9::jsonb,
        settings_source = 'runtime', updated_at = now()
    WHERE queue = $1
    RETURNING queue
), signal AS (
    SELECT pg_notify('dl_jobs', c.queue) FROM changed c
)
SELECT (SELECT count(*) FROM signal) AS signaled;
