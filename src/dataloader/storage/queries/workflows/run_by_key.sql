-- The run started with an idempotency key (the key of its job). $1 the job's idempotency key.
SELECT r.run_id FROM dl_jobs j JOIN dl_workflow_runs r ON r.run_id = j.job_id WHERE j.idempotency_key = $1
