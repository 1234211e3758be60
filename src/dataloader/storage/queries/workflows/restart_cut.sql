-- Cut a run's history back to before position $2 (restart from a step, docs/workflows.md), only
-- while its job has ended failed, canceled or lost (locked: a retry cannot slip in between) and no
-- gather is cut (its children keep their ids and join rows: not built yet). The signals the cut
-- waits took are freed for the replay, its deadline is cleared, and the cut is journaled. $1 run id,
-- $2 the first position cut.
-- Returns the job's status (no row: no such run), whether a gather stood in the way, and the
-- positions removed (NULL: nothing was cut).
WITH job AS (
    SELECT j.job_id, j.queue, j.status::text AS status FROM dl_jobs j
    WHERE j.job_id = $1 AND EXISTS (SELECT 1 FROM dl_workflow_runs r WHERE r.run_id = $1)
    FOR UPDATE OF j
), allowed AS (
    SELECT job.* FROM job
    WHERE job.status IN ('failed', 'canceled', 'lost')
      AND NOT EXISTS (SELECT 1 FROM dl_workflow_steps s WHERE s.run_id = $1 AND s.seq >= $2 AND s.kind = 'gather')
), cut AS (
    DELETE FROM dl_workflow_steps s USING allowed WHERE s.run_id = allowed.job_id AND s.seq >= $2
    RETURNING s.seq
), undated AS (
    -- the run was given up at its deadline or otherwise; running it again is a new decision
    UPDATE dl_workflow_runs r SET deadline_at = NULL FROM allowed WHERE r.run_id = allowed.job_id
), freed AS (
    UPDATE dl_workflow_signals g SET consumed_seq = NULL
    FROM allowed WHERE g.run_id = allowed.job_id AND g.consumed_seq >= $2
), journal AS (
    INSERT INTO dl_job_events (job_id, queue, kind, payload)
    SELECT job_id, queue, 'workflow_restart',
           jsonb_build_object('from_seq', $2::int, 'removed', (SELECT count(*) FROM cut))
    FROM allowed
)
SELECT job.status,
       EXISTS (SELECT 1 FROM dl_workflow_steps s WHERE s.run_id = $1 AND s.seq >= $2 AND s.kind = 'gather') AS gather,
       CASE WHEN EXISTS (SELECT 1 FROM allowed) THEN (SELECT count(*) FROM cut) END AS removed
FROM job
