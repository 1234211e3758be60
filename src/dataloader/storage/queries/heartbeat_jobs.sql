-- Extend the leases of running attempts ($1 job ids, $2 their attempts). Fenced: an attempt that
-- is no longer running with that number gets no row back.
-- The journal gets a 'heartbeat' row for an attempt's first heartbeat and then at most one per
-- hour (0015): liveness is the row's heartbeat_at and lease, renewed on every beat; the journal
-- keeps a trail without 360 rows per running job-hour. `journaled` is true exactly when this
-- statement set heartbeat_journaled_at (to this transaction's now()).
-- key_backlog: 16 or more jobs wait unparked behind the attempt's lock_key (enqueued while it runs):
-- the worker parks them (0017, park_key_waiters.sql), as after a claim.
WITH beat AS (
    UPDATE dl_jobs j
    SET heartbeat_at = now(),
        lease_expires_at = now() + make_interval(secs => j.lease_ttl_sec),
        heartbeat_journaled_at = CASE WHEN j.heartbeat_journaled_at IS NULL
                                        OR j.heartbeat_journaled_at <= now() - interval '1 hour'
                                      THEN now() ELSE j.heartbeat_journaled_at END
    FROM unnest($1::uuid[], $2::int[]) AS i(job_id, attempt)
    -- `status::text`: the rows are found by job_id (the primary key) only; said as `status =
    -- 'running'`, an unanalyzed table let PostgreSQL AND the key lookup with a scan of
    -- ix_dl_jobs_running_lease, which holds an entry per attempt run since the last vacuum
    -- (11,000 read per finish in a 20,000-job drain).
    WHERE j.job_id = ANY ($1::uuid[]) AND j.job_id = i.job_id AND j.status::text = 'running' AND j.attempt = i.attempt
    RETURNING j.job_id, j.queue, j.attempt, j.lock_key, j.cancel_requested,
              j.heartbeat_journaled_at = now() AS journaled
), journal AS (
    INSERT INTO dl_job_events (job_id, queue, kind, payload)
    SELECT job_id, queue, 'heartbeat', jsonb_build_object('attempt', attempt) FROM beat WHERE journaled
)
SELECT b.job_id, b.cancel_requested,
       (SELECT count(*) FROM (
           SELECT 1 FROM dl_jobs w
           WHERE w.lock_key = b.lock_key AND (w.status IN ('queued', 'running')) IS TRUE AND NOT COALESCE(w.status = 'running', false)
             AND NOT w.key_parked AND w.available_at <= now()
           LIMIT 16) backlog) >= 16 AS key_backlog
FROM beat b;
