-- Histogram buckets (run and wait, every status together) of queue $1 (NULL: every queue) with
-- hour in [$2, $3): the input of the p95 (retention/stats.py).
SELECT hour, queue, metric, bucket, sum(jobs)::bigint AS jobs
FROM dl_stats_hist
WHERE hour >= $2::timestamptz AND hour < $3::timestamptz
  AND ($1::text IS NULL OR queue = $1::text)
GROUP BY hour, queue, metric, bucket
ORDER BY queue, hour, metric, bucket;
