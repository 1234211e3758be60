-- How many jobs of queue $1 with status $2 finished more than $3 seconds ago (what a prune would
-- delete; the dry run), one range of ix_dl_jobs_finished.
SELECT count(*)::bigint AS jobs
FROM dl_jobs
WHERE queue = $1
  AND status = $2::dl_status
  AND status IN ('succeeded', 'failed', 'canceled', 'lost')
  AND finished_at < now() - make_interval(secs => $3::float8)
  AND held_at IS NULL;  -- held jobs are never pruned (0014); a heap check per candidate
