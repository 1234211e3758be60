-- The children run $1 started in generations a restart left (shown on its page as the earlier
-- generations'), oldest generation first, then by position. $1 run id. A run restarted rarely has
-- any; the parent index (parent_run_id, parent_seq) finds them.
WITH kids AS (
    SELECT c.run_id, c.workflow, c.parent_seq, c.parent_generation, c.created_at
    FROM dl_workflow_runs c JOIN dl_workflow_runs p ON p.run_id = c.parent_run_id
    WHERE c.parent_run_id = $1 AND p.run_id = $1 AND c.parent_generation < p.generation
)
SELECT k.run_id, k.workflow, k.parent_seq, k.parent_generation, j.status::text AS status
FROM kids k
-- the ids as an index condition too: with the join alone a generic plan made on an empty table
-- walked dl_jobs' whole primary key (tests/storage/test_plan_stability.py)
LEFT JOIN dl_jobs j ON j.job_id = k.run_id AND j.job_id = ANY (ARRAY(SELECT run_id FROM kids))
ORDER BY k.parent_generation, k.parent_seq, k.created_at, k.run_id
