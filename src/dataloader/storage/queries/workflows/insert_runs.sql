-- The workflow rows of runs whose jobs were just inserted in this transaction (the job is the run:
-- run_id = job_id). $1 run ids, $2 workflow names, $3 parent run id (NULL: a top-level run),
-- $4 the parent's gather position, $5 seconds from now to the runs' deadline (NULL: a child gets its
-- parent's, a top-level run none). A child records its parent's generation as it is now (the
-- caller's transaction is fenced on the parent's running job, and only an ended run is restarted,
-- so it cannot change meanwhile): the join counts it only while the parent stays in it.
-- A run whose row exists (an idempotent start) is left as it is.
INSERT INTO dl_workflow_runs (run_id, workflow, parent_run_id, parent_seq, deadline_at, parent_generation)
SELECT u.run_id, u.workflow, $3::uuid, $4::int,
       COALESCE(now() + make_interval(secs => $5::float8),
                (SELECT p.deadline_at FROM dl_workflow_runs p WHERE p.run_id = $3::uuid)),
       COALESCE((SELECT p.generation FROM dl_workflow_runs p WHERE p.run_id = $3::uuid), 0)
FROM unnest($1::uuid[], $2::text[]) AS u(run_id, workflow)
ON CONFLICT (run_id) DO NOTHING
