-- Pause queue $1: from this statement's commit on, no claim on any node starts a job of it
-- (claim_jobs.sql leaves paused queues out), and when it returns no claim that was in flight
-- can still commit a start (the claim fence, 0029). Running jobs are not touched; enqueue still works.
-- Idempotent: pausing a paused queue keeps its paused_at. Returns the queue's flow row (limits too).
-- $1 queue.
INSERT INTO dl_queue_flow AS f (queue, paused, paused_at, updated_at)
SELECT $1, true, now(), now()
-- the queue's claim fence (0029), exclusively, before the write: waits for the claims in flight
-- (they hold it shared until they commit); a claim that asks after this sees the pause
FROM (SELECT pg_advisory_xact_lock(1145849424, hashtext($1))) AS fence
ON CONFLICT (queue) DO UPDATE
SET paused = true,
    paused_at = CASE WHEN f.paused THEN f.paused_at ELSE now() END,
    updated_at = now()
RETURNING f.queue, f.paused, f.paused_at, f.updated_at, f.concurrency, f.partition_concurrency, f.rate_limit,
          f.rate_period_sec, f.partition_rate_limit, f.partition_rate_period_sec, f.settings_source, f.fair_share, f.fair_weights;
