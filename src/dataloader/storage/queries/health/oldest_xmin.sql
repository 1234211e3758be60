-- What holds back the xmin horizon (dl_db_oldest_xmin_age_seconds / _xids): while it stays, VACUUM
-- cannot remove the dead rows of dl_jobs and dl_job_events and every claim walks more of them. The
-- holders are open transactions of client backends (not this one, which holds a snapshot only for
-- this statement; not autovacuum, which the horizon ignores), prepared transactions, and
-- replication slots. Returns the holder open longest (seconds; a slot has no start time and only
-- counts in xids) with what an operator needs to find it, and the largest xid age of all.
-- Zero rows: nothing holds the horizon. A role without pg_read_all_stats does not see other
-- roles' transactions. No parameters.
WITH holders AS (
    SELECT 'backend' AS kind, pid, application_name, state, xact_start, query_start,
           GREATEST(age(backend_xmin), coalesce(age(backend_xid), 0)) AS xid_age, left(query, 200) AS query
    FROM pg_stat_activity
    WHERE (backend_xmin IS NOT NULL OR backend_xid IS NOT NULL)
      AND pid <> pg_backend_pid() AND backend_type <> 'autovacuum worker'
    UNION ALL
    SELECT 'prepared', NULL, gid, 'prepared', prepared, prepared, age(transaction), NULL
    FROM pg_prepared_xacts
    UNION ALL
    SELECT 'slot', NULL, slot_name, CASE WHEN active THEN 'active' ELSE 'inactive' END, NULL, NULL,
           GREATEST(coalesce(age(xmin), 0), coalesce(age(catalog_xmin), 0)), NULL
    FROM pg_replication_slots
    WHERE xmin IS NOT NULL OR catalog_xmin IS NOT NULL
)
SELECT kind, pid, application_name, state, xact_start, query_start, query,
       GREATEST(extract(epoch FROM now() - GREATEST(LEAST(xact_start, now()),
                                                    timestamptz '1970-01-01 00:00:00+00')), 0)::float8 AS age_sec,
       (max(xid_age) OVER ())::bigint AS max_xid_age
FROM holders
ORDER BY xact_start ASC NULLS LAST, xid_age DESC
LIMIT 1;
