-- What a run's attempt replays from: its wake count (read with the history, in one snapshot, so a
-- wake after this read is a wake it has not seen) and every recorded position, oldest first; and
-- its job's lease, which its children's jobs get, and the seconds that lease has left for attempt $2
-- by the database's clock (NULL when the job is not running with it; see step_may_start.sql), and the
-- seconds left to the run's deadline (negative: passed; NULL: none), and its restart generation
-- (the children it starts derive their ids from it).
-- $1 run id, $2 attempt. One row with NULL seq when nothing is recorded yet; no row: no such run.
SELECT r.wakes, r.generation, j.lease_ttl_sec,
       CASE WHEN j.status::text = 'running' AND j.attempt = $2 AND j.lease_expires_at > now()
            THEN EXTRACT(epoch FROM j.lease_expires_at - now())::float8 END AS lease_left_sec,
       EXTRACT(epoch FROM r.deadline_at - now())::float8 AS deadline_left_sec,
       s.seq, s.kind, s.name, s.state, s.result::text AS result, s.error, s.attempts, s.wake_at, s.remaining, s.job_id
FROM dl_workflow_runs r
LEFT JOIN dl_jobs j ON j.job_id = r.run_id
LEFT JOIN dl_workflow_steps s ON s.run_id = r.run_id
WHERE r.run_id = $1
ORDER BY s.seq
