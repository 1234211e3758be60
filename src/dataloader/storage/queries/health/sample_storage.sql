-- Take one storage sample (health/storage.py, leader only, every DL_STORAGE_SAMPLE_SEC): for each
-- table we own (named dl_*, in dl_jobs' schema, not itself a partition) its heap (main, free space
-- map, visibility map), index and TOAST bytes, live and dead tuples, and its last autovacuum and
-- autoanalyze, written to dl_storage_samples at one `now()` and returned. No parameters.
--
-- A partitioned table is the sum of its leaves (pg_partition_tree, which lists nothing for a plain
-- table: that one is its own only leaf), its last autovacuum the latest of any leaf. The sizes stat the relations' files and the
-- numbers come from the statistics views, so no table is read: the cost grows with the number of
-- relations, not of rows, and it is paid once per period on one node, not at every scrape.
WITH owned AS (
    SELECT c.oid AS relid, c.relname::text AS table_name, c.relkind
    FROM pg_class c
    WHERE c.relnamespace = (SELECT relnamespace FROM pg_class WHERE oid = to_regclass('dl_jobs'))
      AND c.relname LIKE 'dl\_%'
      AND c.relkind IN ('r', 'p')
      AND NOT c.relispartition
), leaves AS (
    SELECT o.table_name, o.relid FROM owned o WHERE o.relkind = 'r'
    UNION ALL
    SELECT o.table_name, t.relid
    FROM owned o
    CROSS JOIN LATERAL pg_partition_tree(o.relid) t
    WHERE o.relkind = 'p' AND t.isleaf
), sized AS (
    SELECT l.table_name,
           sum(pg_relation_size(l.relid, 'main') + pg_relation_size(l.relid, 'fsm')
               + pg_relation_size(l.relid, 'vm'))::bigint AS heap_bytes,
           sum(pg_indexes_size(l.relid))::bigint AS index_bytes,
           sum(CASE WHEN c.reltoastrelid <> 0 THEN pg_total_relation_size(c.reltoastrelid) ELSE 0 END)::bigint
               AS toast_bytes,
           coalesce(sum(s.n_live_tup), 0)::bigint AS live_tuples,
           coalesce(sum(s.n_dead_tup), 0)::bigint AS dead_tuples,
           max(s.last_autovacuum) AS last_autovacuum,
           max(s.last_autoanalyze) AS last_autoanalyze
    FROM leaves l
    JOIN pg_class c ON c.oid = l.relid
    LEFT JOIN pg_stat_all_tables s ON s.relid = l.relid
    GROUP BY l.table_name
)
INSERT INTO dl_storage_samples (sampled_at, table_name, heap_bytes, index_bytes, toast_bytes, live_tuples,
                                dead_tuples, last_autovacuum, last_autoanalyze)
SELECT now(), table_name, heap_bytes, index_bytes, toast_bytes, live_tuples, dead_tuples, last_autovacuum,
       last_autoanalyze
FROM sized
RETURNING sampled_at, table_name, heap_bytes, index_bytes, toast_bytes, live_tuples, dead_tuples,
          last_autovacuum, last_autoanalyze;
