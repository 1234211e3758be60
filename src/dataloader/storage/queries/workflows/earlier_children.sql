-- The children run $1 started in generations a restart left (shown on its page as the earlier
-- generations'), oldest generation first, then by position. $1 run id. A run restarted rarely has
-- any; the parent index (parent_run_id, parent_seq) finds them.
SELECT c.run_id, c.workflow, c.parent_seq, c.parent_generation, j.status::text AS status
FROM dl_workflow_runs c
JOIN dl_workflow_runs p ON p.run_id = c.parent_run_id
LEFT JOIN dl_jobs j ON j.job_id = c.run_id
WHERE c.parent_run_id = $1 AND p.run_id = $1 AND c.parent_generation < p.generation
ORDER BY c.parent_generation, c.parent_seq, c.created_at, c.run_id
