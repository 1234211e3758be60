-- The jobs below a run that have not ended: its runs below (children, their children…), deepest
-- last, then the step jobs of the run and of those runs (a step with job options runs as a job of
-- its own, docs/workflows.md). $1 run id.
WITH RECURSIVE below AS (
    SELECT r.run_id, 1 AS depth FROM dl_workflow_runs r WHERE r.parent_run_id = $1
    UNION ALL
    SELECT r.run_id, b.depth + 1 FROM dl_workflow_runs r JOIN below b ON r.parent_run_id = b.run_id
    WHERE b.depth < 100
), family AS (
    SELECT run_id, depth FROM below
    UNION ALL
    SELECT s.job_id, coalesce(b.depth, 0) + 1000
    FROM dl_workflow_steps s LEFT JOIN below b ON b.run_id = s.run_id
    WHERE (s.run_id = $1 OR s.run_id IN (SELECT run_id FROM below)) AND s.job_id IS NOT NULL AND s.state = 'pending'
)
-- the descendants' ids as an index condition too: with the join alone a generic plan made on an
-- empty table walked dl_jobs' whole primary key (tests/storage/test_plan_stability.py)
SELECT f.run_id FROM family f JOIN dl_jobs j ON j.job_id = f.run_id
WHERE j.job_id = ANY (ARRAY(SELECT d.run_id FROM family d)) AND j.status IN ('queued', 'running')
ORDER BY f.depth
