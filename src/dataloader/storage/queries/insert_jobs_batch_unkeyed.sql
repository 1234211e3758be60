-- insert_jobs_batch.sql for a batch with no idempotency key and every job_id given (the fast path
-- of App.enqueue_many): nothing can be skipped, so there is no ON CONFLICT (a speculative
-- insertion per row) and no join back to the input order; it returns how many rows it inserted
-- (the caller's ids, all of them). Each job still gets its 'queued' journal row in this statement.
-- Parameters as insert_jobs_batch.sql's ($5, the keys, all NULL).
WITH inserted AS (
    INSERT INTO dl_jobs (job_id, queue, task, args, idempotency_key, lock_key, partition_key,
                         priority, available_at, max_attempts, lease_ttl_sec, producer, timeout_sec, request_id, traceparent)
    SELECT t.job_id, t.queue, t.task, t.args, t.idempotency_key, t.lock_key, t.partition_key,
           t.priority, COALESCE(t.available_at, now()), t.max_attempts, t.lease_ttl_sec, $12, t.timeout_sec,
           $14::text, $15::text
    FROM unnest($1::uuid[], $2::text[], $3::text[], $4::text[]::jsonb[], $5::text[], $6::text[], $7::text[],
                $8::int[], $9::timestamptz[], $10::int[], $11::int[], $13::int[])
         AS t(job_id, queue, task, args, idempotency_key, lock_key, partition_key,
              priority, available_at, max_attempts, lease_ttl_sec, timeout_sec)
    RETURNING job_id, queue, task
), journal AS (
    INSERT INTO dl_job_events (job_id, queue, kind, payload)
    SELECT job_id, queue, 'queued', jsonb_strip_nulls(jsonb_build_object('task', task, 'request_id', $14::text))
    FROM inserted
)
SELECT count(*) AS inserted FROM inserted;
