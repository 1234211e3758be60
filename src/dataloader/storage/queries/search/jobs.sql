-- Search jobs by the operator's filter, newest first, one page at a time (keyset pagination).
-- The filter ($1..$12: search/filter.sql, included here, in search/count.sql and in
-- operations/batch_ids.sql): $1 queues text[], $2 tasks text[], $3 statuses dl_status[],
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
-- @include search/filter
  AND ($13::timestamptz IS NULL OR (created_at, job_id) < ($13::timestamptz, $14::uuid))
ORDER BY created_at DESC, job_id DESC
LIMIT $15;
