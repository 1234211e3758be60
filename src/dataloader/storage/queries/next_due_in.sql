-- After a claim that found nothing: seconds (by the database clock) until the next delayed job of
-- queue $1 becomes runnable (the cap, a day, when none is waiting), and which claim statement the
-- queue wants now (fair: claim_jobs_fair.sql, 0024). Served by ix_dl_jobs_claim (queue,
-- available_at) WHERE queued, and one probe of dl_queue_flow's primary key.
-- date_part returns float8, so an available_at of 'infinity' gives Infinity instead of an
-- "interval out of range" error; the answer is capped at a day (the fallback poll comes sooner).
-- A paused queue (dl_queue_flow, 0019) has nothing due (the cap): its workers sleep until a NOTIFY (the
-- resume sends one) instead of waking for jobs they may not claim; so has a paused task (0025).
-- `fair` comes back with the due time because a claim statement of the other kind finds nothing
-- in a queue whose fair_share changed (each gates on it): the worker switches and claims again,
-- so a change takes effect at the next claim of every worker, with no cache and no extra
-- statement while nothing changes.
SELECT (SELECT LEAST(date_part('epoch', min(q.available_at)) - date_part('epoch', now()), 86400)::float8
        FROM dl_jobs q
        WHERE q.status = 'queued' AND q.queue = $1 AND q.available_at > now()
          AND NOT EXISTS (SELECT 1 FROM dl_queue_flow f WHERE f.queue = $1 AND f.paused)
          AND q.task <> ALL (ARRAY(SELECT t.task FROM dl_task_flow t WHERE t.queue = $1 AND t.paused))) AS due_in,
       COALESCE((SELECT f.fair_share FROM dl_queue_flow f WHERE f.queue = $1), false) AS fair;
