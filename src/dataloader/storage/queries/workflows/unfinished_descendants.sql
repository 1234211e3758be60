-- The runs below a run (children, their children…) that have not ended, deepest last. $1 run id.
WITH RECURSIVE below AS (
    SELECT r.run_id, 1 AS depth FROM dl_workflow_runs r WHERE r.parent_run_id = $1
    UNION ALL
    SELECT r.run_id, b.depth + 1 FROM dl_workflow_runs r JOIN below b ON r.parent_run_id = b.run_id
    WHERE b.depth < 100
)
-- the descendants' ids as an index condition too: with the join alone a generic plan made on an
-- empty table walked dl_jobs' whole primary key (tests/storage/test_plan_stability.py)
SELECT b.run_id FROM below b JOIN dl_jobs j ON j.job_id = b.run_id
WHERE j.job_id = ANY (ARRAY(SELECT d.run_id FROM below d)) AND j.status IN ('queued', 'running')
ORDER BY b.depth
