-- The server's client connections by state (dl_db_connections{state}) next to its limit
-- (dl_db_max_connections; superuser_reserved_connections are not usable by the service). Server
-- wide, because max_connections is: every client of the server spends the same budget. A role
-- without pg_read_all_stats sees other roles' backends with a NULL state: counted as `unknown`.
-- One row per state, each carrying the limits (a scrape makes one round trip). No parameters.
SELECT coalesce(state, 'unknown') AS state, count(*)::int AS connections,
       current_setting('max_connections')::int AS max_connections,
       current_setting('superuser_reserved_connections')::int AS reserved_connections
FROM pg_stat_activity
WHERE backend_type = 'client backend'
GROUP BY 1
ORDER BY 1;
