-- Search jobs by the operator's filter, newest first, one page at a time (keyset pagination).
-- The filter ($1..$12, the same block in search/count.sql and operations/batch_ids.sql; a unit
-- test keeps the three identical): $1 queues text[], $2 tasks text[], $3 statuses dl_status[],
-- $4 error ILIKE pattern, $5/$6 created_at range [from, to), $7/$8 finished_at range [from, to),
-- $9 args @> jsonb, $10 args @? jsonpath (text), $11 lock_key prefix, $12 held (NULL: either).
-- A NULL filter matches everything. $13/$14 the (created_at, job_id) of the previous page's last
-- row, $15 page size.
-- The caller runs this with plan_cache_mode = force_custom_plan (SearchRepository), so every NULL
-- filter folds away and the planner sees the real statuses: one failed/canceled/lost status walks
-- ix_dl_jobs_trouble (status, created_at, job_id) backwards and stops at the page; no status walks
-- the 0003 (created_at, job_id) index. args are left out, as in the listing.
SELECT job_id, queue, task, status::text AS status, attempt, max_attempts, priority, lock_key,
       partition_key, idempotency_key, cancel_requested, producer, error, progress,
       created_at, available_at, started_at, finished_at, heartbeat_at, lease_expires_at, timeout_sec,
       queue_overdue_at, held_at, held_reason
FROM dl_jobs
-- filter:begin
WHERE ($1::text[] IS NULL OR queue = ANY ($1::text[]))
  AND ($2::text[] IS NULL OR task = ANY ($2::text[]))
  -- one status as an equality (the CASE folds in a custom plan): the planner then takes it as a
  -- constant of the index order, where = ANY over a leading column (before PostgreSQL 17) leaves
  -- the scan unordered and adds a Sort of every match
  AND ($3::dl_status[] IS NULL OR CASE WHEN cardinality($3::dl_status[]) = 1 THEN status = ($3::dl_status[])[1]
                                       ELSE status = ANY ($3::dl_status[]) END)
  AND ($4::text IS NULL OR error ILIKE $4::text)
  AND ($5::timestamptz IS NULL OR created_at >= $5::timestamptz)
  AND ($6::timestamptz IS NULL OR created_at < $6::timestamptz)
  AND ($7::timestamptz IS NULL OR finished_at >= $7::timestamptz)
  AND ($8::timestamptz IS NULL OR finished_at < $8::timestamptz)
  AND ($9::jsonb IS NULL OR args @> $9::jsonb)
  AND ($10::text IS NULL OR args @? $10::text::jsonpath)
  AND ($11::text IS NULL OR starts_with(lock_key, $11::text))
  AND ($12::boolean IS NULL OR (held_at IS NOT NULL) = $12::boolean)
-- filter:end
  AND ($13::timestamptz IS NULL OR (created_at, job_id) < ($13::timestamptz, $14::uuid))
ORDER BY created_at DESC, job_id DESC
LIMIT $15;
