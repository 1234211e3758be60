-- A process task and the dl_jobs row that runs it (same id), with the job's 'queued' journal row,
-- in one statement. $1 task_id, $2 ns, $3 process_id, $4 task type, $5 args (JSON text), $6 history
-- range (JSON text or NULL), $7 idempotency key (NULL: none), $8 due time (NULL: now), $9 queue,
-- $10 lock_key, $11 priority, $12 max_attempts, $13 lease_ttl_sec, $14 producer, $15 request id,
-- $16 the caller's W3C traceparent (NULL: not traced, 0020), $17 the W3C span that caused the task
-- without being its parent (the step that armed a timer; its first attempt links to it; stored as
-- attempt_span, 0021, which later holds the previous attempt's span; NULL: none).
-- A known idempotency key inserts nothing and returns no row: the caller reads the existing task.
-- The job's args only name the task; the task's own args live in dl_process_tasks (one copy).
-- Due "now" is clock_timestamp(), not the transaction start: callers are claimed in the order
-- their tasks were inserted (arrival order), whatever order their transactions began in.
WITH task AS (
    INSERT INTO dl_process_tasks (task_id, ns, process_id, task_type, args, history_range, idempotency_key,
                                  scheduled_at)
    VALUES ($1, $2, $3, $4, $5::text::jsonb, $6::text::jsonb, $7, COALESCE($8::timestamptz, clock_timestamp()))
    ON CONFLICT (ns, idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING
    RETURNING task_id, scheduled_at
), job AS (
    INSERT INTO dl_jobs (job_id, queue, task, args, lock_key, priority, available_at, max_attempts,
                         lease_ttl_sec, producer, request_id, traceparent, attempt_span)
    SELECT t.task_id, $9, 'dl.process', jsonb_build_object('ns', $2::text, 'id', $3::text, 'type', $4::text),
           $10, $11, t.scheduled_at, $12, $13, $14, $15::text, $16::text, $17::text
    FROM task t
    RETURNING job_id, queue, request_id
),
-- @include processes/task_job_journal
SELECT task_id, scheduled_at FROM task
