-- The tasks a restart runs again, as new tasks and jobs in one statement, queued in the order
-- given ($4: one microsecond apart, so the claim takes them in that order), each naming the task
-- it repeats (restart_of). $1 ns, $2 id, $3 new task ids, $4 types, $5 args (JSON text), $6 history
-- ranges (JSON text or NULL), $7 the tasks they repeat, $8 queue, $9 lock_key, $10 priority,
-- $11 max_attempts, $12 lease_ttl_sec.
WITH given AS (
    SELECT r.*, now() + make_interval(secs => r.ord / 1e6::float8) AS due
    FROM unnest($3::uuid[], $4::text[], $5::text[], $6::text[], $7::uuid[])
         WITH ORDINALITY AS r(task_id, task_type, args, history_range, restart_of, ord)
), task AS (
    INSERT INTO dl_process_tasks (task_id, ns, process_id, task_type, args, history_range, scheduled_at, restart_of)
    SELECT task_id, $1, $2, task_type, args::jsonb, history_range::jsonb, due, restart_of FROM given
    RETURNING task_id, task_type, scheduled_at
), job AS (
    INSERT INTO dl_jobs (job_id, queue, task, args, lock_key, priority, available_at, max_attempts,
                         lease_ttl_sec, producer)
    SELECT t.task_id, $8, 'dl.process', jsonb_build_object('ns', $1::text, 'id', $2::text, 'type', t.task_type),
           $9, $10, t.scheduled_at, $11, $12, 'restart'
    FROM task t
    RETURNING job_id, queue
), journal AS (
    INSERT INTO dl_job_events (job_id, queue, kind, payload)
    SELECT job_id, queue, 'queued', jsonb_build_object('task', 'dl.process', 'reason', 'process_restart')
    FROM job
)
SELECT count(*) AS queued FROM job
