-- Hourly buckets of queue $1 (NULL: every queue) with hour in [$2, $3), by status. Reads the
-- primary key range of dl_stats_hourly: cost follows the hours asked for, not dl_jobs' size.
SELECT hour, queue, status, jobs, run_count, run_sum, run_max, wait_count, wait_sum, wait_max
FROM dl_stats_hourly
WHERE hour >= $2::timestamptz AND hour < $3::timestamptz
  AND ($1::text IS NULL OR queue = $1::text)
ORDER BY queue, hour, status;
