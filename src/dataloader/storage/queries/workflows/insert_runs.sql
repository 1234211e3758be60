-- The workflow rows of runs whose jobs were just inserted in this transaction (the job is the run:
-- run_id = job_id). $1 run ids, $2 workflow names, $3 parent run id (NULL: a top-level run),
-- $4 the parent's gather position. A run whose row exists (an idempotent start) is left as it is.
INSERT INTO dl_workflow_runs (run_id, workflow, parent_run_id, parent_seq)
SELECT u.run_id, u.workflow, $3::uuid, $4::int
FROM unnest($1::uuid[], $2::text[]) AS u(run_id, workflow)
ON CONFLICT (run_id) DO NOTHING
