-- Seconds (by the database clock) until the next delayed job of queue $1 becomes runnable;
-- the cap (a day) when none is waiting. Served by ix_dl_jobs_claim (queue, available_at) WHERE queued.
-- date_part returns float8, so an available_at of 'infinity' gives Infinity instead of an
-- "interval out of range" error; the answer is capped at a day (the fallback poll comes sooner).
-- A paused queue (dl_queue_flow, 0019) has nothing due (the cap): its workers sleep until a NOTIFY (the
-- resume sends one) instead of waking for jobs they may not claim.
SELECT LEAST(date_part('epoch', min(available_at)) - date_part('epoch', now()), 86400)::float8 AS due_in
FROM dl_jobs
WHERE status = 'queued' AND queue = $1 AND available_at > now()
  AND NOT EXISTS (SELECT 1 FROM dl_queue_flow f WHERE f.queue = $1 AND f.paused);
