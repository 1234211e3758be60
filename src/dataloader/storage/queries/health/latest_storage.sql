-- The newest storage sample, one row per table (dl_table_size_bytes and friends on /metrics, the
-- console's Storage page): the rows at the greatest sampled_at, found by a backward scan of the
-- key's first column, so a scrape costs one index probe whatever the history kept. Times as
-- epoch seconds for the gauges. No parameters; no rows before the first sample.
SELECT s.table_name AS "table", s.heap_bytes, s.index_bytes, s.toast_bytes, s.live_tuples, s.dead_tuples,
       extract(epoch FROM s.sampled_at)::float8 AS sampled_at,
       extract(epoch FROM s.last_autovacuum)::float8 AS last_autovacuum,
       extract(epoch FROM s.last_autoanalyze)::float8 AS last_autoanalyze
FROM dl_storage_samples s
WHERE s.sampled_at = (SELECT max(sampled_at) FROM dl_storage_samples)
ORDER BY s.table_name;
