-- Fire a due schedule: the compare-and-set that makes a tick enqueue once across replicas. Only
-- the row still at the revision the scheduler read (and not paused) is moved to its next tick;
-- a replica racing for the same tick blocks on the row lock until the winner commits, then finds
-- another revision and updates nothing. Runs in the transaction that inserts the tick's jobs
-- (insert_jobs_batch.sql) and runs (insert_runs.sql), so the three commit together.
-- $1 name, $2 revision read, $3 the new next_run_at (NULL: no tick left; the row is then paused),
-- $4 when the last enqueued tick was (NULL: none enqueued this time).
UPDATE dl_schedules
SET next_run_at = COALESCE($3, next_run_at),
    paused = paused OR $3 IS NULL,
    last_run_at = COALESCE($4, last_run_at),
    revision = revision + 1
WHERE name = $1 AND revision = $2 AND NOT paused
RETURNING name, revision;
