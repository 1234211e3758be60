-- One recorded position of a run (read after a record that found it already written). $1 run id, $2 seq.
SELECT seq, kind, name, state, result::text AS result, error, attempts, wake_at, remaining, job_id
FROM dl_workflow_steps
WHERE run_id = $1 AND seq = $2
