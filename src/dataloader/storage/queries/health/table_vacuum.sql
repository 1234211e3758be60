-- Dead and live tuples and the last (auto)vacuum of the queue's two hot tables, dl_jobs and
-- dl_job_events (dl_table_dead_tuples{table} and friends), from the statistics collector: no table
-- is read. to_regclass resolves them on the search_path like every other statement, and a table
-- that does not exist is simply absent. Times are epoch seconds (NULL: never). No parameters.
SELECT relname AS "table", n_dead_tup::bigint AS dead_tuples, n_live_tup::bigint AS live_tuples,
       extract(epoch FROM last_autovacuum)::float8 AS last_autovacuum,
       extract(epoch FROM last_vacuum)::float8 AS last_vacuum,
       autovacuum_count::bigint AS autovacuum_count
FROM pg_stat_all_tables
WHERE relid IN (to_regclass('dl_jobs'), to_regclass('dl_job_events'))
ORDER BY relname;
