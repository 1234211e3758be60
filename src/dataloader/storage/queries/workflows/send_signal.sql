-- Store a signal for a run that has not ended. The run's job row is locked first (see
-- dl_workflow_wake, 0030: the same order as the wake that follows in this transaction).
-- $1 run id, $2 name, $3 payload (JSON text).
-- Returns the job's status (no row: no such run) and the signal's id (NULL: the run has ended).
WITH run AS (
    SELECT j.job_id, j.status FROM dl_jobs j
    WHERE j.job_id = $1 AND EXISTS (SELECT 1 FROM dl_workflow_runs r WHERE r.run_id = $1)
    FOR UPDATE OF j
), sig AS (
    INSERT INTO dl_workflow_signals (run_id, name, payload)
    SELECT job_id, $2, $3::text::jsonb FROM run WHERE status IN ('queued', 'running')
    RETURNING signal_id
)
SELECT run.status::text AS status, sig.signal_id FROM run LEFT JOIN sig ON true
