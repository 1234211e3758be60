-- Claim the next runnable job of one queue for this connection.
-- $1 queue, $2 worker name.
-- Order: priority, then the time the job became runnable (available_at), then created_at. For a
-- job enqueued to run now available_at = created_at, so this is the spec's (priority, created_at)
-- order; a delayed job or a retry queues by its due time, as in Oban and River. It is what lets
-- ix_dl_jobs_claim_order serve the claim in O(log n) whatever the backlog (see migration 0004).
-- Skips jobs whose lock_key already has a running job, so a job waiting behind a busy key is not
-- claimed-and-backed-off over and over; the advisory lock is still taken (last column) to settle
-- the race between two claims that ran at the same instant.
WITH candidate AS (
    SELECT q.job_id
    FROM dl_jobs q
    WHERE q.status = 'queued'
      AND q.queue = $1
      AND q.available_at <= now()
      AND NOT EXISTS (
          SELECT 1 FROM dl_jobs r WHERE r.lock_key = q.lock_key AND r.status = 'running'
      )
    ORDER BY q.priority ASC, q.available_at ASC, q.created_at ASC
    LIMIT 1
    FOR UPDATE SKIP LOCKED
), claimed AS (
    UPDATE dl_jobs j
    SET status = 'running',
        started_at = COALESCE(j.started_at, now()),
        attempt = j.attempt + 1,
        lease_expires_at = now() + make_interval(secs => j.lease_ttl_sec),
        heartbeat_at = now()
    FROM candidate c
    WHERE j.job_id = c.job_id
    RETURNING j.job_id, j.queue, j.task, j.args, j.lock_key, j.partition_key, j.lease_ttl_sec,
              j.attempt, j.max_attempts, j.created_at, j.available_at, j.lease_expires_at
), journal AS (
    INSERT INTO dl_job_events (job_id, queue, kind, payload)
    SELECT job_id, queue, 'picked', jsonb_build_object('attempt', attempt, 'worker', $2::text)
    FROM claimed
)
SELECT c.*,
       extract(epoch FROM now() - GREATEST(c.created_at, c.available_at))::float8 AS wait_sec,
       pg_try_advisory_lock(hashtext(c.lock_key)) AS locked
FROM claimed c;
