-- The runs a bulk workflow operation would examine, by status: its total and its dry run's
-- breakdown (a restart skips the runs not ended, a cancel the ended ones). $1..$6 as in
-- select_filter.sql. Run with custom plans (search/custom_plans.sql), so the NULLs of the filter
-- fold away and one workflow's name picks its index.
SELECT j.status::text AS status, count(*) AS runs
-- @include workflows/select_filter
GROUP BY j.status
