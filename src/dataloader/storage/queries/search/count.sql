-- How many jobs match the operator's filter ($1..$12, as in search/jobs.sql), and $13: count at
-- most this many (NULL: all). A bulk operation's dry run and its `total`, and a search's count.
-- The cap keeps "how many?" on a table of millions a bounded read when the caller only needs to
-- know "more than N". Run with force_custom_plan, like search/jobs.sql.
SELECT count(*)::bigint AS jobs FROM (
    SELECT 1
    FROM dl_jobs
-- @include search/filter
    LIMIT $13
) matched;
