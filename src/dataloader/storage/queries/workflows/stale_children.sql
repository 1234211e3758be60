-- The runs below run $1 that have not ended and were started by a generation of it that a restart
-- left (their parent_generation is older than its generation), with every run below those: what a
-- restart cancels so that no old child keeps running unseen. $1 run id. Nearest first, so a run is
-- canceled before the children it could still start.
WITH RECURSIVE below AS (
    SELECT c.run_id, 1 AS depth FROM dl_workflow_runs c JOIN dl_workflow_runs p ON p.run_id = c.parent_run_id
    WHERE c.parent_run_id = $1 AND p.run_id = $1 AND c.parent_generation < p.generation
    UNION ALL
    SELECT r.run_id, b.depth + 1 FROM dl_workflow_runs r JOIN below b ON r.parent_run_id = b.run_id
    WHERE b.depth < 100
)
-- the ids as an index condition too, as unfinished_descendants.sql (a generic plan made on an empty
-- table walked dl_jobs' whole primary key)
SELECT b.run_id FROM below b JOIN dl_jobs j ON j.job_id = b.run_id
WHERE j.job_id = ANY (ARRAY(SELECT d.run_id FROM below d)) AND j.status IN ('queued', 'running')
ORDER BY b.depth
