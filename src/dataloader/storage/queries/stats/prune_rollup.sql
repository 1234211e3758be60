-- Drop rollup rows of hours before $1 (the stats' own retention, DL_STATS_KEEP). Returns the
-- number of hourly rows removed.
WITH hist AS (
    DELETE FROM dl_stats_hist WHERE hour < $1::timestamptz
), errors AS (
    DELETE FROM dl_stats_errors WHERE hour < $1::timestamptz
), hourly AS (
    DELETE FROM dl_stats_hourly WHERE hour < $1::timestamptz RETURNING 1
)
SELECT count(*)::bigint AS deleted FROM hourly;
