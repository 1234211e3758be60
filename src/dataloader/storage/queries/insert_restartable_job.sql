-- Trigger a restartable job (docs/patterns.md "Restartable jobs"): its lock_key ($6) is also its
-- restart key. If a job of that key is queued and not yet claimed, the trigger updates it in place
-- (args, time, priority) and journals 'retriggered'; otherwise it inserts a new job, which, when
-- one of the key runs now, waits behind it on the lock_key: it runs exactly once more after the
-- current run, never beside it. Parameters as in insert_job.sql ($5, the idempotency key, is
-- always NULL here: the two promises differ).
-- The unique partial index ux_dl_jobs_restart_key (0011) decides between the two under any
-- concurrency. A claim racing this statement either takes the row first (it is no longer queued:
-- PostgreSQL retries the insert, which then queues a new job) or after (it runs the new args).
-- A queued job of the key with another task or queue is left alone and nothing is returned: the
-- caller reports the conflict.
WITH upserted AS (
    INSERT INTO dl_jobs (job_id, queue, task, args, idempotency_key, lock_key, partition_key,
                         priority, available_at, max_attempts, lease_ttl_sec, producer, timeout_sec,
                         chain_next, chain_id, restart_key, request_id, traceparent)
    VALUES ($1, $2, $3, $4::text::jsonb, $5, $6, $7, $8, COALESCE($9, now()), $10, $11, $12, $14::int,
            $15::text::jsonb, CASE WHEN $15::text IS NOT NULL THEN $1::uuid END, $6, $13::text, $16::text)
    ON CONFLICT (restart_key) WHERE status = 'queued' AND restart_key IS NOT NULL
    DO UPDATE SET args = EXCLUDED.args,
                  available_at = EXCLUDED.available_at,
                  priority = EXCLUDED.priority,
                  partition_key = EXCLUDED.partition_key,
                  max_attempts = EXCLUDED.max_attempts,
                  lease_ttl_sec = EXCLUDED.lease_ttl_sec,
                  timeout_sec = EXCLUDED.timeout_sec,
                  chain_next = EXCLUDED.chain_next,
                  chain_id = CASE WHEN EXCLUDED.chain_next IS NOT NULL THEN dl_jobs.job_id END,
                  -- its place in line may have moved: back in the claim's walk, never parked behind
                  -- a head it no longer follows (0017)
                  key_parked = false
    WHERE dl_jobs.task = EXCLUDED.task AND dl_jobs.queue = EXCLUDED.queue
    -- xmax is 0 on a freshly inserted row version, not on one this statement updated
    RETURNING *, (xmax = 0) AS created
), journal AS (
    INSERT INTO dl_job_events (job_id, queue, kind, payload)
    SELECT job_id, queue, CASE WHEN created THEN 'queued' ELSE 'retriggered' END,
           jsonb_strip_nulls(jsonb_build_object('task', task, 'request_id', $13::text))
    FROM upserted
)
SELECT * FROM upserted;
