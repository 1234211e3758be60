-- Pause task $2 of queue $1 (0025): from this statement's commit on, no claim on any node starts a
-- job of that task in that queue (claim_jobs.sql and claim_jobs_fair.sql leave it out); the
-- queue's other tasks run on, running jobs are not touched, enqueue still works. Idempotent:
-- pausing a paused task keeps its paused_at. Returns the task's flow row. As for a queue, the claim
-- fence (0029) makes it wait for the queue's claims in flight.
-- $1 queue, $2 task.
INSERT INTO dl_task_flow AS t (queue, task, paused, paused_at, updated_at)
SELECT $1, $2, true, now(), now()
-- the queue's claim fence (0029), exclusively, before the write: waits for the claims in flight
-- (they hold it shared until they commit); a claim that asks after this sees the pause
FROM (SELECT pg_advisory_xact_lock(1145849424, hashtext($1))) AS fence
ON CONFLICT (queue, task) DO UPDATE
SET paused = true,
    paused_at = CASE WHEN t.paused THEN t.paused_at ELSE now() END,
    updated_at = now()
RETURNING t.queue, t.task, t.paused, t.paused_at;
