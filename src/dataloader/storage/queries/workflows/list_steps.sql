-- A run's recorded history, oldest first. $1 run id.
SELECT seq, kind, name, state, result::text AS result, error, attempts, wake_at, remaining, created_at, finished_at
FROM dl_workflow_steps
WHERE run_id = $1
ORDER BY seq
