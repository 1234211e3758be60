-- The journal of the jobs $1 (uuid[]) as JSON text, by job and oldest first, for their archive
-- file (retention/pruner.py). Read in the transaction that locked the jobs: the rows cannot gain
-- an event meanwhile (a finished, locked job takes no state change). Walks ix_dl_job_events_job.
SELECT e.job_id, to_jsonb(e)::text AS row_json
FROM dl_job_events e
WHERE e.job_id = ANY ($1::uuid[])
ORDER BY e.job_id, e.event_id;
