-- The next batch of a bulk operation: the ids of the jobs matching its filter ($1..$12, as in
-- search/jobs.sql) created before the operation started ($13: its snapshot time), after its
-- keyset cursor ($14/$15: the (created_at, job_id) of the last job it handled; NULL at the start),
-- oldest first, at most $16. The cursor moves over every job it passes, changed or not, so a job
-- that matches again later (requeued, failed again) is never handled a second time, and jobs
-- enqueued after the start are left alone. Run with force_custom_plan (custom_plans.sql), so the
-- statuses of the filter pick ix_dl_jobs_trouble as they do for a search.
SELECT job_id, created_at
FROM dl_jobs
-- @include search/filter
  AND created_at <= $13::timestamptz
  AND ($14::timestamptz IS NULL OR (created_at, job_id) > ($14::timestamptz, $15::uuid))
ORDER BY created_at, job_id
LIMIT $16;
