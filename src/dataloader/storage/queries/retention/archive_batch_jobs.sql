-- Lock and read one small batch of finished jobs of queue $1 with status $2 that finished more
-- than $3 seconds ago, at most $4, for archival before their delete (retention/pruner.py with
-- DL_ARCHIVE_URL): each job's whole row as JSON text (to_jsonb: every column, the 003 ones and the
-- later migrations' alike, with no list to keep in step), its id and finished_at.
--
-- The same rows prune_batch.sql would delete (keep the two predicates alike): one index range of
-- ix_dl_jobs_finished, oldest first, SKIP LOCKED, held jobs left alone. FOR UPDATE keeps the rows
-- as read until the caller's transaction deletes them (retention/delete_archived_jobs.sql) or
-- rolls back after a failed export, so what is archived is exactly what is deleted.
SELECT j.job_id, j.finished_at, to_jsonb(j)::text AS row_json
FROM dl_jobs j
WHERE j.queue = $1
  AND j.status = $2::dl_status
  AND j.status IN ('succeeded', 'failed', 'canceled', 'lost')
  AND j.finished_at < now() - make_interval(secs => $3::float8)
  AND j.held_at IS NULL
ORDER BY j.finished_at
LIMIT $4
FOR UPDATE SKIP LOCKED;
