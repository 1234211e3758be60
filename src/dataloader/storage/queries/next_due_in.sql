-- Seconds (by the database clock) until the next delayed job of queue $1 becomes runnable, or,
-- for a queue with a rate limit (0022) and runnable jobs, until its window opens (the oldest start
-- counted in a window leaves it: a job held back by the rate may start then); the cap (a day) when
-- neither is waiting. Delayed jobs: served by ix_dl_jobs_claim (queue, available_at) WHERE queued.
-- Windows: dl_flow_starts (queue, started_at) and (queue, partition_key, started_at), read only for
-- a rate-limited queue (a primary-key probe of dl_queue_flow otherwise). 1 ms after the opening,
-- so the claim the timer wakes finds the window open. Windows end at statement_timestamp(), not
-- now(): this runs in the worker's step transaction, whose start precedes the starts its own claim
-- just recorded (stamped by the gate's clock), which now() would leave out.
-- date_part returns float8, so an available_at of 'infinity' gives Infinity instead of an
-- "interval out of range" error; the answer is capped at a day (the fallback poll comes sooner).
-- A paused queue (dl_queue_flow, 0019) has nothing due (the cap): its workers sleep until a NOTIFY (the
-- resume sends one) instead of waking for jobs they may not claim.
-- `limited`: the queue has a limit (0022), so its workers claim with claim_limited_jobs.sql (the
-- plain claim_jobs.sql leaves it out: an empty claim of a limited queue is followed by this).
-- A paused task (0025) has nothing due either. `fair`: the queue is fair (0024), so its workers
-- claim with claim_jobs_fair.sql (which also carries the flow gate), whatever `limited` says.
-- A queue with a limited task (0027: dl_queue_flow.task_limited) is `limited` too, and a task's
-- rate window wakes the worker like the queue's.
-- $1 queue.
SELECT LEAST(
    (SELECT date_part('epoch', min(available_at)) - date_part('epoch', now())
     FROM dl_jobs
     WHERE status = 'queued' AND queue = $1 AND available_at > now()
       AND NOT EXISTS (SELECT 1 FROM dl_queue_flow f WHERE f.queue = $1 AND f.paused)
       AND task || '' <> ALL (ARRAY(SELECT t.task FROM dl_task_flow t WHERE t.queue = $1 AND t.paused))),
    (SELECT date_part('epoch', LEAST(
                (SELECT min(s.started_at) FROM dl_flow_starts s
                 WHERE s.queue = $1 AND f.rate_limit IS NOT NULL AND s.started_at <= statement_timestamp()
                   AND s.started_at > statement_timestamp() - make_interval(secs => f.rate_period_sec))
                    + make_interval(secs => f.rate_period_sec),
                (SELECT min(s.started_at) FROM dl_flow_starts s
                 WHERE s.queue = $1 AND f.partition_rate_limit IS NOT NULL AND s.started_at <= statement_timestamp()
                   AND s.started_at > statement_timestamp() - make_interval(secs => f.partition_rate_period_sec))
                    + make_interval(secs => f.partition_rate_period_sec)))
            - date_part('epoch', statement_timestamp()) + 0.001
     FROM dl_queue_flow f
     WHERE f.queue = $1 AND NOT f.paused AND (f.rate_limit IS NOT NULL OR f.partition_rate_limit IS NOT NULL)
       AND EXISTS (SELECT 1 FROM dl_jobs q
                   WHERE q.status = 'queued' AND q.queue = $1 AND q.available_at <= now() AND NOT q.key_parked)),
    -- a limited task's rate window (0027), for a task with runnable jobs: its oldest start in the
    -- window leaves it then (read only while the queue's row says task_limited)
    (SELECT min(date_part('epoch', (SELECT min(s.started_at) FROM dl_task_starts s
                                    WHERE s.queue = $1 AND s.task = t.task AND s.started_at <= statement_timestamp()
                                      AND s.started_at > statement_timestamp() - make_interval(secs => t.rate_period_sec))
                                   + make_interval(secs => t.rate_period_sec))
                - date_part('epoch', statement_timestamp()) + 0.001)
     FROM dl_task_flow t JOIN dl_queue_flow f ON f.queue = t.queue
     WHERE t.queue = $1 AND f.task_limited AND NOT f.paused AND NOT t.paused AND t.rate_limit IS NOT NULL
       AND EXISTS (SELECT 1 FROM dl_jobs q
                   WHERE q.status = 'queued' AND q.queue = $1 AND q.task = t.task AND q.available_at <= now()
                     AND NOT q.key_parked)),
    86400)::float8 AS due_in,
    EXISTS (SELECT 1 FROM dl_queue_flow f
            WHERE f.queue = $1
              AND (f.concurrency IS NOT NULL OR f.partition_concurrency IS NOT NULL OR f.rate_limit IS NOT NULL
                   OR f.partition_rate_limit IS NOT NULL OR f.task_limited)) AS limited,
    COALESCE((SELECT f.fair_share FROM dl_queue_flow f WHERE f.queue = $1), false) AS fair;
