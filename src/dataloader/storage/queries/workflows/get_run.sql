-- A run with its job's state. $1 run id. The input and result as JSON text (decoded by the model: a
-- string input must not be taken for JSON text a second time). Args encrypted at rest (an envelope,
-- docs/security.md) come whole, `input_sealed` true: only the model can open them.
SELECT r.run_id, r.workflow, r.parent_run_id, r.parent_seq, r.deadline_at, r.generation, j.status::text AS status, j.queue,
       CASE WHEN j.args ?& array['$dl_enc', 'kid', 'ct'] THEN j.args::text ELSE (j.args->'input')::text END AS input,
       j.args ?& array['$dl_enc', 'kid', 'ct'] AS input_sealed, j.result::text AS result, j.error, j.attempt, j.available_at,
       j.created_at, j.started_at, j.finished_at
FROM dl_workflow_runs r JOIN dl_jobs j ON j.job_id = r.run_id
WHERE r.run_id = $1
