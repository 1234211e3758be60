-- The storage trend (the console's Storage page, app.health.storage): per table, its total bytes
-- (heap + indexes + TOAST) and dead tuples in the last sample of each hour since $1 seconds ago,
-- oldest first. One range of the key (sampled_at) over at most DL_STORAGE_SAMPLE_KEEP of samples.
-- $1 window: seconds back from now
SELECT DISTINCT ON (table_name, date_trunc('hour', sampled_at))
       table_name AS "table", date_trunc('hour', sampled_at) AS hour, sampled_at,
       (heap_bytes + index_bytes + toast_bytes)::bigint AS total_bytes, dead_tuples
FROM dl_storage_samples
WHERE sampled_at >= now() - make_interval(secs => $1::float8)
ORDER BY table_name, date_trunc('hour', sampled_at), sampled_at DESC;
