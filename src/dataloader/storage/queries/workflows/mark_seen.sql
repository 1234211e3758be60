-- Before a run hands itself back (sleep, wait, join), remember the wake count its attempt read, so
-- a wake that came after that read makes the hand-back due now (dl_workflow_requeue, 0030). Fenced:
-- an attempt that lost its job writes nothing. $1 run id, $2 attempt, $3 wakes read.
UPDATE dl_workflow_runs r SET seen_wakes = $3
FROM dl_jobs j
WHERE r.run_id = $1 AND j.job_id = $1 AND j.status::text = 'running' AND j.attempt = $2
