-- Jobs newest first, with optional filters, one page at a time (keyset pagination).
-- $1 queue, $2 task, $3 statuses (text[]), $4 created_from (inclusive), $5 created_to (exclusive),
-- $6/$7 the (created_at, job_id) of the last row of the previous page, $8 page size.
-- A NULL filter matches everything. asyncpg plans each call with its values (custom plans), so a
-- NULL filter folds away and the (created_at, job_id) index of 0003 serves the order and the cursor.
-- args are left out: they can be large and may hold secrets; the status endpoint has the details.
SELECT job_id, queue, task, status::text AS status, attempt, max_attempts, priority, lock_key,
       partition_key, idempotency_key, cancel_requested, producer, error, progress,
       created_at, available_at, started_at, finished_at, heartbeat_at, lease_expires_at
FROM dl_jobs
WHERE ($1::text IS NULL OR queue = $1::text)
  AND ($2::text IS NULL OR task = $2::text)
  AND ($3::text[] IS NULL OR status::text = ANY ($3::text[]))
  AND ($4::timestamptz IS NULL OR created_at >= $4::timestamptz)
  AND ($5::timestamptz IS NULL OR created_at < $5::timestamptz)
  AND ($6::timestamptz IS NULL OR (created_at, job_id) < ($6::timestamptz, $7::uuid))
ORDER BY created_at DESC, job_id DESC
LIMIT $8;
