-- Dead and live tuples and the last (auto)vacuum of the queue's two hot tables, dl_jobs and
-- dl_job_events (dl_table_dead_tuples{table} and friends), from the statistics collector: no table
-- is read. The journal is partitioned (0039): its numbers are its partitions' (pg_partition_tree's
-- leaves; the parent itself has no heap), summed, with the latest vacuum of any of them.
-- to_regclass resolves the tables on the search_path like every other statement, and a table that
-- does not exist is simply absent. Times are epoch seconds (NULL: never). No parameters.
SELECT CASE WHEN s.relid = to_regclass('dl_jobs') THEN 'dl_jobs' ELSE 'dl_job_events' END AS "table",
       sum(s.n_dead_tup)::bigint AS dead_tuples, sum(s.n_live_tup)::bigint AS live_tuples,
       extract(epoch FROM max(s.last_autovacuum))::float8 AS last_autovacuum,
       extract(epoch FROM max(s.last_vacuum))::float8 AS last_vacuum,
       sum(s.autovacuum_count)::bigint AS autovacuum_count
FROM pg_stat_all_tables s
WHERE s.relid = to_regclass('dl_jobs')
   OR s.relid IN (SELECT t.relid FROM pg_partition_tree(to_regclass('dl_job_events')) AS t WHERE t.isleaf)
GROUP BY 1
ORDER BY 1
