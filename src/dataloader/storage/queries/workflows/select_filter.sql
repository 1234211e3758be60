-- The runs a bulk workflow operation's filter matches (model/workflow_selection.py RunFilter), for
-- select_count, select_sample and select_batch: $1 workflow (NULL: any), $2 statuses (text[], NULL:
-- any; the run's job's), $3/$4 created range [from, to) (NULL: open), $5 top-level only (true),
-- children only (false) or both (NULL), $6 the operation's snapshot (runs started after it are left
-- alone). The run row's created_at and run_id, served by 0031's (created_at, run_id) index (or, for
-- one workflow, its (workflow, created_at, run_id) one); the status is the job's, by primary key.
FROM dl_workflow_runs r JOIN dl_jobs j ON j.job_id = r.run_id
WHERE ($1::text IS NULL OR r.workflow = $1::text)
  AND ($2::text[] IS NULL OR j.status::text = ANY ($2::text[]))
  AND ($3::timestamptz IS NULL OR r.created_at >= $3::timestamptz)
  AND ($4::timestamptz IS NULL OR r.created_at < $4::timestamptz)
  AND ($5::boolean IS NULL OR (r.parent_run_id IS NULL) = $5::boolean)
  AND r.created_at <= $6::timestamptz
