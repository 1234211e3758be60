-- What a run's attempt replays from: its wake count (read with the history, in one snapshot, so a
-- wake after this read is a wake it has not seen) and every recorded position, oldest first; and
-- its job's lease, which its children's jobs get.
-- $1 run id. One row with NULL seq when nothing is recorded yet; no row: no such run.
SELECT r.wakes, (SELECT j.lease_ttl_sec FROM dl_jobs j WHERE j.job_id = r.run_id) AS lease_ttl_sec,
       s.seq, s.kind, s.name, s.state, s.result::text AS result, s.error, s.attempts, s.wake_at, s.remaining
FROM dl_workflow_runs r
LEFT JOIN dl_workflow_steps s ON s.run_id = r.run_id
WHERE r.run_id = $1
ORDER BY s.seq
