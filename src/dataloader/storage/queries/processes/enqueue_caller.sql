-- The task of a caller (init, call, repair) and the dl_jobs row that runs it, checked and inserted
-- in ONE statement (one round trip, no explicit transaction: the caller's latency is the point).
-- $15 NULL (init): create the process (status 'init') and queue its task only if the id was free.
-- $15 a status (call: running, repair: error): queue the task only if the process has it now (the
-- step checks again when it runs: a status changed in between ends the task with an error).
-- $1 task_id, $2 ns, $3 process_id, $4 task type, $5 args (JSON text), $6 history range (JSON text
-- or NULL), $7 idempotency key, $8 queue, $9 lock_key, $10 priority, $11 max_attempts,
-- $12 lease_ttl_sec, $13 producer, $14 request id, ($15 above), $16 the caller's W3C traceparent (NULL:
-- not traced, 0020). Due at clock_timestamp(): callers are claimed in
-- the order their tasks were inserted. Returns the status found (NULL: no such process), whether
-- the process was created, whether the task was queued (not: wrong status, id taken, the queue
-- paused, or a known idempotency key, which the caller then reads) and whether queue $8 (or its
-- task dl.process) is paused: then nothing is written, and the caller hears so at once instead of
-- waiting its whole timeout for a task no worker may start (issue 35).
WITH existing AS (
    SELECT status FROM dl_processes WHERE ns = $2 AND id = $3
), paused AS (
    SELECT EXISTS (SELECT 1 FROM dl_queue_flow WHERE queue = $8 AND paused)
        OR EXISTS (SELECT 1 FROM dl_task_flow WHERE queue = $8 AND task = 'dl.process' AND paused) AS yes
), created AS (
    INSERT INTO dl_processes (ns, id, status)
    SELECT $2, $3, 'init' WHERE $15::text IS NULL AND NOT (SELECT yes FROM paused)
    ON CONFLICT (ns, id) DO NOTHING
    RETURNING ns
), allowed AS (
    SELECT 1 AS ok
    WHERE NOT (SELECT yes FROM paused)
      AND CASE WHEN $15::text IS NULL THEN EXISTS (SELECT 1 FROM created)
               ELSE (SELECT status FROM existing) = $15::text END
), task AS (
    INSERT INTO dl_process_tasks (task_id, ns, process_id, task_type, args, history_range, idempotency_key,
                                  scheduled_at)
    SELECT $1, $2, $3, $4, $5::text::jsonb, $6::text::jsonb, $7, clock_timestamp()
    FROM allowed
    ON CONFLICT (ns, idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING
    RETURNING task_id, scheduled_at
), job AS (
    INSERT INTO dl_jobs (job_id, queue, task, args, lock_key, priority, available_at, max_attempts,
                         lease_ttl_sec, producer, request_id, traceparent)
    SELECT t.task_id, $8, 'dl.process', jsonb_build_object('ns', $2::text, 'id', $3::text, 'type', $4::text),
           $9, $10, t.scheduled_at, $11, $12, $13, $14::text, $16::text
    FROM task t
    RETURNING job_id, queue, request_id
),
-- @include processes/task_job_journal
SELECT (SELECT status FROM existing) AS status, (SELECT count(*) FROM created) > 0 AS created,
       (SELECT count(*) FROM task) > 0 AS queued, (SELECT yes FROM paused) AS paused
