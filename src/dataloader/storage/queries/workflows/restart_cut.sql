-- Cut a run's history back to before position $2 (restart from a step, docs/workflows.md), only
-- while its job has ended failed, canceled or lost (locked: a retry cannot slip in between). The
-- run's generation goes up by one in this same statement: the children its cut gathers started
-- (and every child-like job derived from the run and a position) belong to the old generation
-- from here on, so the join no longer counts their ends (0036's trigger) and the replay derives new
-- ids for the ones it starts. The signals the cut waits took are freed for the replay, its deadline
-- is cleared, and the cut is journaled. $1 run id, $2 the first position cut.
-- Returns the job's status (no row: no such run), the positions removed and the run's generation
-- now (NULLs: nothing was cut).
WITH job AS (
    SELECT j.job_id, j.queue, j.status::text AS status FROM dl_jobs j
    WHERE j.job_id = $1 AND EXISTS (SELECT 1 FROM dl_workflow_runs r WHERE r.run_id = $1)
    FOR UPDATE OF j
), allowed AS (
    SELECT job.* FROM job WHERE job.status IN ('failed', 'canceled', 'lost')
), cut AS (
    DELETE FROM dl_workflow_steps s USING allowed WHERE s.run_id = allowed.job_id AND s.seq >= $2
    RETURNING s.seq, s.kind
), renewed AS (
    -- the run was given up at its deadline or otherwise; running it again is a new decision
    UPDATE dl_workflow_runs r SET deadline_at = NULL, generation = r.generation + 1
    FROM allowed WHERE r.run_id = allowed.job_id
    RETURNING r.generation
), kept AS (
    -- the children of the gathers the cut keeps (all done: a run ends only at or after its last
    -- gather's decision) stay the run's own: they move to the new generation with it, so only the
    -- cut positions' children are left behind in the old one
    UPDATE dl_workflow_runs c SET parent_generation = (SELECT generation FROM renewed)
    FROM allowed
    WHERE c.parent_run_id = allowed.job_id AND c.parent_seq < $2
      AND c.parent_generation = (SELECT generation FROM renewed) - 1
), freed AS (
    UPDATE dl_workflow_signals g SET consumed_seq = NULL
    FROM allowed WHERE g.run_id = allowed.job_id AND g.consumed_seq >= $2
), journal AS (
    INSERT INTO dl_job_events (job_id, queue, kind, payload)
    SELECT job_id, queue, 'workflow_restart',
           jsonb_build_object('from_seq', $2::int, 'removed', (SELECT count(*) FROM cut),
                              'gathers_removed', (SELECT count(*) FROM cut WHERE cut.kind = 'gather'),
                              'generation', (SELECT generation FROM renewed))
    FROM allowed
)
SELECT job.status,
       CASE WHEN EXISTS (SELECT 1 FROM allowed) THEN (SELECT count(*) FROM cut) END AS removed,
       (SELECT generation FROM renewed) AS generation
FROM job
