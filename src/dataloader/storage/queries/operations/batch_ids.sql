-- The next batch of a bulk operation: the ids of the jobs matching its filter ($1..$12, as in
-- search/jobs.sql) created before the operation started ($13: its snapshot time), after its
-- keyset cursor ($14/$15: the (created_at, job_id) of the last job it handled; NULL at the start),
-- oldest first, at most $16. The cursor moves over every job it passes, changed or not, so a job
-- that matches again later (requeued, failed again) is never handled a second time, and jobs
-- enqueued after the start are left alone. Run with force_custom_plan (custom_plans.sql), so the
-- statuses of the filter pick ix_dl_jobs_trouble as they do for a search.
SELECT job_id, created_at
FROM dl_jobs
-- filter:begin
WHERE ($1::text[] IS NULL OR queue = ANY ($1::text[]))
  AND ($2::text[] IS NULL OR task = ANY ($2::text[]))
  -- one status as an equality (the CASE folds in a custom plan): the planner then takes it as a
  -- constant of the index order, where = ANY over a leading column (before PostgreSQL 17) leaves
  -- the scan unordered and adds a Sort of every match
  AND ($3::dl_status[] IS NULL OR CASE WHEN cardinality($3::dl_status[]) = 1 THEN status = ($3::dl_status[])[1]
                                       ELSE status = ANY ($3::dl_status[]) END)
  AND ($4::text IS NULL OR error ILIKE $4::text)
  AND ($5::timestamptz IS NULL OR created_at >= $5::timestamptz)
  AND ($6::timestamptz IS NULL OR created_at < $6::timestamptz)
  AND ($7::timestamptz IS NULL OR finished_at >= $7::timestamptz)
  AND ($8::timestamptz IS NULL OR finished_at < $8::timestamptz)
  AND ($9::jsonb IS NULL OR args @> $9::jsonb)
  AND ($10::text IS NULL OR args @? $10::text::jsonpath)
  AND ($11::text IS NULL OR starts_with(lock_key, $11::text))
  AND ($12::boolean IS NULL OR (held_at IS NOT NULL) = $12::boolean)
-- filter:end
  AND created_at <= $13::timestamptz
  AND ($14::timestamptz IS NULL OR (created_at, job_id) > ($14::timestamptz, $15::uuid))
ORDER BY created_at, job_id
LIMIT $16;
