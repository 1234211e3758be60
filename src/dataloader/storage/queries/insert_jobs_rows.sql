-- The rows of a batch enqueue (insert_jobs_batch.sql, insert_jobs_batch_unkeyed.sql include it as
-- the body of their `inserted` CTE; the keyed one adds its ON CONFLICT after it): the dl_jobs
-- INSERT of one row per element of $1 (the job ids, all given).
-- Each other column comes as an array and a fill value ($2..$12 arrays, $16..$26 fills, in
-- JobRepository.insert_job_columns' order): a column whose value is the same for every job of the
-- batch (queue, task, args '{}', no key, the default priority ...) is sent as an empty array and
-- its one value as the fill, so the client encodes (and the server decodes) one value, not one per
-- job. unnest pads the shorter arrays with NULLs, which COALESCE turns into the fill; a full
-- array's fill is NULL, so its own NULLs (no key, no time limit) stay NULL. A NULL lock_key is the
-- job's own id (the default in every face), and a NULL available_at is now().
-- $13: the producer of them all; $14: the HTTP request id (NULL from Python); $15: the caller's
-- W3C traceparent (NULL when tracing is off, 0020).
INSERT INTO dl_jobs (job_id, queue, task, args, idempotency_key, lock_key, partition_key, priority, available_at,
                     max_attempts, lease_ttl_sec, timeout_sec, producer, request_id, traceparent)
SELECT t.job_id, COALESCE(t.queue, $16::text), COALESCE(t.task, $17::text), COALESCE(t.args, $18::text)::jsonb,
       COALESCE(t.idempotency_key, $19::text), COALESCE(t.lock_key, $20::text, t.job_id::text),
       COALESCE(t.partition_key, $21::text), COALESCE(t.priority, $22::int),
       COALESCE(t.available_at, $23::timestamptz, now()), COALESCE(t.max_attempts, $24::int),
       COALESCE(t.lease_ttl_sec, $25::int), COALESCE(t.timeout_sec, $26::int), $13::text, $14::text, $15::text
FROM unnest($1::uuid[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[], $8::int[],
            $9::timestamptz[], $10::int[], $11::int[], $12::int[])
     AS t(job_id, queue, task, args, idempotency_key, lock_key, partition_key, priority, available_at,
          max_attempts, lease_ttl_sec, timeout_sec)
