-- Whether an earlier attempt of this job was taken back by the reaper because its node died: the
-- journal's requeue row with reason lease_expired (it stopped heartbeating) or worker_died (a node
-- on its machine saw its pid gone, jobs/reaper.py). $1 job_id.
SELECT EXISTS (
    SELECT 1 FROM dl_job_events
    WHERE job_id = $1 AND kind = 'requeue' AND payload->>'reason' IN ('lease_expired', 'worker_died')
) AS reaped
