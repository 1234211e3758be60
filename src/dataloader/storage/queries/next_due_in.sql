-- Seconds (by the database clock) until the next delayed job of queue $1 becomes runnable;
-- NULL when none is waiting. Served by ix_dl_jobs_claim (queue, available_at) WHERE queued.
SELECT extract(epoch FROM min(available_at) - now())::float8 AS due_in
FROM dl_jobs
WHERE status = 'queued' AND queue = $1 AND available_at > now();
