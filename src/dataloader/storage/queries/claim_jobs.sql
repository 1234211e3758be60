-- Claim up to {limit} runnable jobs of queue $1 for worker $2, in one statement: mark them running
-- (attempt + 1, lease), journal 'picked', and take each lock_key's advisory lock on this
-- connection (the queue's control connection, which holds the locks of all its running jobs).
--
-- Order: priority, then the time the job became runnable (available_at), then created_at. For a
-- job enqueued to run now available_at = created_at, so this is the spec's (priority, created_at)
-- order; a delayed job or a retry queues by its due time, as in Oban and River. It is what lets
-- ix_dl_jobs_claim_order serve the claim in O(log n) whatever the backlog (see migration 0004).
--
-- Jobs whose lock_key already has a running job are skipped, so a job waiting behind a busy key
-- is not claimed and backed off again and again; the advisory lock settles the race between two
-- claims at the same instant. Advisory locks are re-entrant within a session, so `locked` is also
-- true for a second job of the same key in one batch: the caller detects that by lock_hash.
--
-- {limit} is replaced by an integer, one prepared statement per batch size: with a parameter
-- ($3) PostgreSQL's reusable generic plan guesses the LIMIT and picks a sequential scan, so it
-- re-planned the claim on every call instead (about half of the claim's time).
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
    LIMIT {limit}
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
              j.attempt, j.max_attempts, j.priority, j.created_at, j.available_at
), journal AS (
    INSERT INTO dl_job_events (job_id, queue, kind, payload)
    SELECT job_id, queue, 'picked', jsonb_build_object('attempt', attempt, 'worker', $2::text)
    FROM claimed
)
SELECT c.job_id, c.queue, c.task, c.args, c.lock_key, c.partition_key, c.lease_ttl_sec, c.attempt,
       c.max_attempts,
       extract(epoch FROM now() - GREATEST(c.created_at, c.available_at))::float8 AS wait_sec,
       hashtext(c.lock_key) AS lock_hash,
       -- the HTTP request that enqueued the job, so worker log lines carry its request id
       (SELECT e.payload->>'request_id' FROM dl_job_events e
        WHERE e.job_id = c.job_id AND e.kind = 'queued' ORDER BY e.event_id LIMIT 1) AS request_id,
       pg_try_advisory_lock(hashtext(c.lock_key)) AS locked
FROM (SELECT * FROM claimed ORDER BY priority, available_at, created_at) c;
