-- The run started with an idempotency key (the key of its job). $1 the job's idempotency key.
-- the key's job found first, then its run row by its key (a join let a generic plan walk the whole
-- primary key of dl_jobs; tests/storage/test_plan_stability.py)
SELECT r.run_id FROM dl_workflow_runs r
WHERE r.run_id = ANY (ARRAY(SELECT j.job_id FROM dl_jobs j WHERE j.idempotency_key = $1))
