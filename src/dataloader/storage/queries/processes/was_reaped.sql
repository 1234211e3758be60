-- Whether an earlier attempt of this job was taken back by the reaper (its node stopped
-- heartbeating): the journal's requeue row with reason lease_expired. $1 job_id.
SELECT EXISTS (
    SELECT 1 FROM dl_job_events
    WHERE job_id = $1 AND kind = 'requeue' AND payload->>'reason' = 'lease_expired'
) AS reaped
