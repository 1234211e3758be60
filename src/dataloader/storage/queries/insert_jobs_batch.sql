-- Enqueue many jobs in one statement (arrays of equal length), each with its 'queued' journal row.
-- A NULL job_id gets a generated one. Jobs whose idempotency_key already exists are skipped.
-- $1..$11: the jobs' columns as arrays, one element per job: $1 job_id, $2 queue, $3 task, $4 args,
-- $5 idempotency_key, $6 lock_key, $7 partition_key, $8 priority, $9 available_at, $10 max_attempts,
-- $11 lease_ttl_sec. $12: the producer of them all.
-- $13: each job's run-time limit in seconds (NULL: none of its own). $14: the HTTP request id
-- (NULL from Python), stored on every job and in its journal row as a single trigger's is. $15: the
-- caller's W3C traceparent (NULL when tracing is off, 0020), stored on every job.
-- Returns the inserted job ids in input order. $4 (args) is JSON text per job, so the statement also
-- runs on a caller's connection that has no jsonb codec of ours.
WITH input AS (
    SELECT COALESCE(t.job_id, gen_random_uuid()) AS job_id, t.queue, t.task, t.args, t.idempotency_key,
           t.lock_key, t.partition_key, t.priority, t.available_at, t.max_attempts, t.lease_ttl_sec, t.timeout_sec, t.n
    FROM unnest($1::uuid[], $2::text[], $3::text[], $4::text[]::jsonb[], $5::text[], $6::text[], $7::text[],
                $8::int[], $9::timestamptz[], $10::int[], $11::int[], $13::int[])
         WITH ORDINALITY AS t(job_id, queue, task, args, idempotency_key, lock_key, partition_key,
                              priority, available_at, max_attempts, lease_ttl_sec, timeout_sec, n)
), inserted AS (
    INSERT INTO dl_jobs (job_id, queue, task, args, idempotency_key, lock_key, partition_key,
                         priority, available_at, max_attempts, lease_ttl_sec, producer, timeout_sec, request_id, traceparent)
    SELECT job_id, queue, task, args, idempotency_key, lock_key, partition_key,
           priority, COALESCE(available_at, now()), max_attempts, lease_ttl_sec, $12, timeout_sec, $14::text, $15::text
    FROM input
    ON CONFLICT (idempotency_key) DO NOTHING
    RETURNING job_id, queue, task
), journal AS (
    INSERT INTO dl_job_events (job_id, queue, kind, payload)
    SELECT job_id, queue, 'queued', jsonb_strip_nulls(jsonb_build_object('task', task, 'request_id', $14::text))
    FROM inserted
)
SELECT i.job_id FROM input i JOIN inserted USING (job_id) ORDER BY i.n;
