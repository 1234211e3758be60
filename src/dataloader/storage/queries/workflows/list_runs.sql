-- Runs newest first, one page at a time (keyset pagination), without their history.
-- $1 workflow (NULL: every workflow), $2 statuses (text[], NULL: any), $3/$4 the (created_at, run_id)
-- of the last run of the previous page (NULL: the first page), $5 page size.
-- The order and the cursor are the run row's, served by 0031's (created_at, run_id) index or, for
-- one workflow, its (workflow, created_at, run_id) index (asyncpg plans each call with its values,
-- so a NULL filter folds away). The status is the run's job's, looked up by its primary key.
SELECT r.run_id, r.workflow, r.parent_run_id, r.created_at, j.status::text AS status, j.queue, j.error,
       j.attempt, j.available_at, j.started_at, j.finished_at
FROM dl_workflow_runs r JOIN dl_jobs j ON j.job_id = r.run_id
WHERE ($1::text IS NULL OR r.workflow = $1::text)
  AND ($2::text[] IS NULL OR j.status::text = ANY ($2::text[]))
  AND ($3::timestamptz IS NULL OR (r.created_at, r.run_id) < ($3::timestamptz, $4::uuid))
ORDER BY r.created_at DESC, r.run_id DESC
LIMIT $5
