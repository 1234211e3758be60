-- Delete one small batch of finished jobs of queue $1 with status $2 that finished more than $3
-- seconds ago; at most $4 rows. Their journal rows go with them (ON DELETE CASCADE on
-- dl_job_events.job_id, found through ix_dl_job_events_job). Returns how many jobs were deleted.
--
-- One index range of ix_dl_jobs_finished (queue, status, finished_at): oldest first, never a row
-- of another queue or status or a younger one. SKIP LOCKED: a row someone holds (an operator's
-- retry of a failed job) is left for the next batch instead of waiting. Only finished rows can
-- match, so the claim (queued rows), heartbeats and finishes (running rows) never meet a row this
-- statement locks. The re-check under the row lock (READ COMMITTED) drops a row that was retried
-- meanwhile.
WITH doomed AS (
    SELECT job_id
    FROM dl_jobs
    WHERE queue = $1
      AND status = $2::dl_status
      AND status IN ('succeeded', 'failed', 'canceled', 'lost')
      AND finished_at < now() - make_interval(secs => $3::float8)
      AND held_at IS NULL  -- a held job waits for an operator, whatever its age (0014)
    ORDER BY finished_at
    LIMIT $4
    FOR UPDATE SKIP LOCKED
), gone AS (
    DELETE FROM dl_jobs j
    WHERE j.job_id = ANY (ARRAY(SELECT d.job_id FROM doomed d))
    RETURNING 1
)
SELECT count(*)::bigint AS deleted FROM gone;
