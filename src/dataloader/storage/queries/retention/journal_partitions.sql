-- The journal's partitions (migration 0039): name, range (range_from NULL: from MINVALUE, the
-- legacy partition that holds the rows from before 0039; both NULL: the DEFAULT partition), the
-- planner's row estimate (NULL: never analyzed) and size on disk. Read from the catalog only
-- (pg_inherits and the partition bound), no row of the journal is touched. No parameters.
-- The bound's timestamps are printed with their offset, so the cast back is exact in any TimeZone.
SELECT c.relname::text AS name,
       (regexp_match(pg_get_expr(c.relpartbound, c.oid), 'FROM \(''([^'']+)''\)'))[1]::timestamptz AS range_from,
       (regexp_match(pg_get_expr(c.relpartbound, c.oid), 'TO \(''([^'']+)''\)'))[1]::timestamptz AS range_to,
       pg_get_expr(c.relpartbound, c.oid) = 'DEFAULT' AS is_default,
       CASE WHEN c.reltuples >= 0 THEN c.reltuples::bigint END AS rows_estimate,
       pg_total_relation_size(c.oid)::bigint AS bytes
FROM pg_inherits i
JOIN pg_class c ON c.oid = i.inhrelid
WHERE i.inhparent = to_regclass('dl_job_events')
ORDER BY range_to NULLS LAST, name
