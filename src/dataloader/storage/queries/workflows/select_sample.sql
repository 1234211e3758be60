-- The first runs a bulk workflow operation would examine, oldest first (its dry run's sample):
-- $1..$6 as in select_filter.sql, $7 how many.
SELECT r.run_id, r.workflow, j.status::text AS status, r.created_at, r.parent_run_id
-- @include workflows/select_filter
ORDER BY r.created_at, r.run_id
LIMIT $7
